#!/usr/bin/env bash
# The agent's own CPU time with and without its per-container kernel metrics,
# side by side in one run (what `rootline demo` turns on by default).
#
#   bench/kmetrics-agent-cpu.sh [--seconds 120]
#
# One `rootline server` and three `rootline agent`s run at the same time on
# this host, so the load they see is the same: km (--kmetrics, every metric
# of every container, pushed to the server every second — the demo's
# setting), and off1 and off2 without kernel metrics (off2 is the A/A
# control: the difference between off1 and off2 is this machine's noise).
# All three run the cpu profiler, as the demo's agent does. The script prints
# each agent's user+system CPU seconds over the window (from /proc/<pid>/stat)
# and the ratios km/off1 and off2/off1; the BPF programs' own time runs in
# the traced tasks and is not in these figures (bench/kmetrics-overhead.sh
# measures it). Needs root and BPF.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

seconds=120
while (($#)); do
	case $1 in
	--seconds) seconds=$2; shift 2 ;;
	*) echo "unknown option $1" >&2; exit 2 ;;
	esac
done
bin=${ROOTLINE_BIN:-./bin/rootline}
[[ -x $bin ]] || { echo "build first: make build" >&2; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

"$bin" server --data-dir "$work/data" --log.format json --otlp.grpc.addr 127.0.0.1:0 --otlp.http.addr 127.0.0.1:0 \
	--zipkin.addr 127.0.0.1:0 --query.addr 127.0.0.1:0 2>"$work/server.log" &
pids+=($!)
for _ in $(seq 1 100); do
	grep -q '"rootline server ready"' "$work/server.log" 2>/dev/null && break
	sleep 0.2
done
ready=$(grep '"rootline server ready"' "$work/server.log") || { cat "$work/server.log" >&2; exit 1; }
query=$(sed -n 's/.*"query":"\([^"]*\)".*/\1/p' <<<"$ready")
otlp=$(sed -n 's/.*"otlp_http":"\([^"]*\)".*/\1/p' <<<"$ready")

declare -A agent
start_agent() { # name extra-flags...
	local name=$1
	shift
	"$bin" agent --server "http://$query" --listen 127.0.0.1:0 --socket "$work/$name.sock" --discover=false \
		--log.format json --profilers cpu "$@" >"$work/$name.log" 2>&1 &
	agent[$name]=$!
	pids+=($!)
}
start_agent km --kmetrics --kmetrics.enable all --kmetrics.push-interval 1s --kmetrics.otlp-url "http://$otlp/v1/metrics"
start_agent off1
start_agent off2
sleep 10 # loaded, attached, first pushes done
for n in km off1 off2; do
	kill -0 "${agent[$n]}" 2>/dev/null || { echo "agent $n died:" >&2; cat "$work/$n.log" >&2; exit 1; }
done
declare -A c0 c1
for n in km off1 off2; do c0[$n]=$(cpu_s "${agent[$n]}"); done
echo "date=$(date -u +%FT%TZ) seconds=$seconds loadavg=$(cut -d' ' -f1-3 /proc/loadavg)"
sleep "$seconds"
for n in km off1 off2; do c1[$n]=$(cpu_s "${agent[$n]}"); done
echo "loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg)"
series=$(curl -s "http://$query/api/v1/metrics?name=rootline_kernel_oncpu_seconds&points=2&from=$((($(date +%s) - seconds) * 1000))" | grep -o '"name"' | wc -l)
for n in km off1 off2; do
	awk -v n="$n" -v a="${c0[$n]}" -v b="${c1[$n]}" -v s="$seconds" 'BEGIN{printf "agent=%s cpu_s=%.2f share_of_one_cpu_pct=%.2f\n", n, b-a, 100*(b-a)/s}'
done
awk -v k="${c1[km]}" -v k0="${c0[km]}" -v a="${c1[off1]}" -v a0="${c0[off1]}" -v b="${c1[off2]}" -v b0="${c0[off2]}" \
	'BEGIN{printf "ratio km/off1=%.2f  A/A off2/off1=%.2f\n", (k-k0)/(a-a0), (b-b0)/(a-a0)}'
echo "oncpu series (containers) km pushed in the window: $series"

#!/usr/bin/env bash
# What applying CriticalMetrics saves: the BPF time of the agent's kernel-metric
# programs with every metric on for a workload, then with only the metrics
# `rootline analyze critical-metrics` keeps.
#
#   bench/critmetrics-apply.sh [--record 60s] [--window 20s]
#
# A server and an agent (--kmetrics, nothing enabled by default, 1 s pushes)
# run on loopback; the workload (test/testdata/kphases, app mode: loopback TCP
# ramping up, CPU bursts, page faults mid-run) runs in a cgroup v2 of its own
# with all 14 metrics enabled for it through PUT /api/v1/kmetrics/config.
# After --record, `rootline analyze critical-metrics --apply` clusters what was
# recorded, sends the config to the agent and measures the km_* programs'
# BPF time (kernel BPF statistics) over --window before and after. A second
# --apply of the same config is the A/A control: its before and after differ
# only by the machine's noise.
# Needs root, BPF and Go (to build the workload).
set -euo pipefail
cd "$(dirname "$0")/.."

record=60s window=20s
while (($#)); do
	case $1 in
	--record) record=$2; shift 2 ;;
	--window) window=$2; shift 2 ;;
	*) echo "unknown option $1" >&2; exit 2 ;;
	esac
done
bin=${ROOTLINE_BIN:-./bin/rootline}
[[ -x $bin ]] || { echo "build first: make build" >&2; exit 1; }
secs() { awk -v d="$1" 'BEGIN{ if (d ~ /m$/) print d * 60; else print d + 0 }'; }
cgroot=/sys/fs/cgroup/unified
[[ -e $cgroot/cgroup.procs ]] || cgroot=/sys/fs/cgroup
cg=$cgroot/rootline-bench-cm.$$
work=$(mktemp -d)
server="" agent="" load=""
cleanup() {
	for p in $load $agent $server; do kill -INT "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	rmdir "$cg" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
mkdir "$cg"
go build -o "$work/kphases" ./test/testdata/kphases

"$bin" server --data-dir "$work/data" --log.format json --otlp.grpc.addr 127.0.0.1:0 --otlp.http.addr 127.0.0.1:0 \
	--zipkin.addr 127.0.0.1:0 --query.addr 127.0.0.1:0 2>"$work/server.log" &
server=$!
for _ in $(seq 300); do grep -q '"rootline server ready"' "$work/server.log" && break; sleep 0.1; done
ready=$(grep '"rootline server ready"' "$work/server.log") || { cat "$work/server.log" >&2; exit 1; }
query=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["query"])' "$ready")
otlp=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["otlp_http"])' "$ready")

# The workload waits for a line on stdin, so it is in its cgroup before it works.
total=$(awk -v r="$(secs "$record")" -v w="$(secs "$window")" 'BEGIN{print r + 4 * w + 60}')
mkfifo "$work/go"
"$work/kphases" -mode app -duration "${total}s" <"$work/go" &
load=$!
echo "$load" >"$cg/cgroup.procs"

sock=$work/agent.sock
"$bin" agent --server "http://$query" --listen 127.0.0.1:0 --socket "$sock" --discover=false --profilers "" \
	--target "pid=$load,service=bench-cm" --kmetrics --kmetrics.push-interval 1s \
	--kmetrics.otlp-url "http://$otlp/v1/metrics" --log.level warn 2>"$work/agent.log" &
agent=$!
for _ in $(seq 100); do curl -sf --unix-socket "$sock" http://agent/api/v1/kmetrics >/dev/null && break; sleep 0.1; done
container=/${cg#"$cgroot"/}
curl -sS --fail-with-body --unix-socket "$sock" -X PUT -H 'Content-Type: application/json' http://agent/api/v1/kmetrics/config \
	-d "{\"container\":\"$container\",\"metrics\":[\"all\"],\"enabled\":true,\"rate\":1}" >/dev/null
echo go >"$work/go" &

echo "# machine: $(nproc) CPUs, $(uname -r), $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo)"
echo "# record=$record window=$window load=$(cut -d' ' -f1-3 /proc/loadavg) $(date -u +%FT%TZ)"
sleep "$(secs "$record")"
# One fixed window for both passes: the same data give the same config, so the
# second pass changes nothing and is the A/A control.
to=$(date -u +%FT%TZ)
from=$(date -u -d "@$(($(date +%s) - $(secs "$record")))" +%FT%TZ)
for pass in apply aa-control; do
	echo "## $pass"
	"$bin" analyze critical-metrics --server "http://$query" --from "$from" --to "$to" --apply --agent "unix:$sock" \
		--apply.window "$window" 2>/dev/null | sed -n "/^bench-cm/,/^\$/p; /^applied/,\$p"
done
echo "# load=$(cut -d' ' -f1-3 /proc/loadavg) $(date -u +%FT%TZ)"

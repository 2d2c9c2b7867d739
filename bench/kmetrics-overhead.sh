#!/usr/bin/env bash
# Overhead of the agent's per-container eBPF kernel metrics (issue 7, ViperProbe
# Table 2) on scheduler- and IPC-heavy work, interleaved in one run.
#
#   bench/kmetrics-overhead.sh [--rounds 5] [--messaging-loops 200] [--pipe-loops 200000]
#
# One `rootline agent --kmetrics` runs throughout; the modes are switched live
# through its API (PUT /api/v1/kmetrics/config), which is the feature under test:
#   off         no metric enabled anywhere: no program attached (the agent idles)
#   targeted    every metric enabled, 1-in-1, for the cgroup the benchmark runs in
#   untargeted  every metric enabled for another (idle) cgroup only: every program
#               is attached and pays its config lookup, but records nothing
# Each round runs `perf bench sched messaging` and `perf bench sched pipe` inside a
# cgroup v2 of their own, once per mode; the summary is the mean slowdown of each
# mode against off. A second pass with kernel.bpf_stats_enabled=1 (which itself
# costs two clock reads per program run, so it is not on during the timed pass)
# prints run_time_ns / run_cnt of every km_* program per mode, and the CPU time
# spent in them as a share of the benchmarks' own CPU time (the accounted cost,
# which the machine's throughput noise does not blur).
# Needs root, BPF, linux-perf and bpftool.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

rounds=5 mloops=200 ploops=200000
while (($#)); do
	case $1 in
	--rounds) rounds=$2; shift 2 ;;
	--messaging-loops) mloops=$2; shift 2 ;;
	--pipe-loops) ploops=$2; shift 2 ;;
	*) echo "unknown option $1" >&2; exit 2 ;;
	esac
done
bin=${ROOTLINE_BIN:-./bin/rootline}
[[ -x $bin ]] || { echo "build first: make build" >&2; exit 1; }
command -v perf >/dev/null || { echo "perf not installed (apt-get install linux-perf)" >&2; exit 1; }
command -v bpftool >/dev/null || { echo "bpftool not installed (apt-get install bpftool)" >&2; exit 1; }
cgroot=/sys/fs/cgroup/unified
[[ -e $cgroot/cgroup.procs ]] || cgroot=/sys/fs/cgroup
target=$cgroot/rootline-bench-km-target.$$
other=$cgroot/rootline-bench-km-other.$$
api=127.0.0.1:27171
work=$(mktemp -d)
agent=""
stats0=$(sysctl -n kernel.bpf_stats_enabled)
cleanup() {
	if [[ -n $agent ]] && ! kill -0 "$agent" 2>/dev/null; then
		echo "the agent died:" >&2
		cat "$work/agent.log" >&2
	fi
	[[ -n $agent ]] && { kill -INT "$agent" 2>/dev/null || true; wait "$agent" 2>/dev/null || true; }
	sysctl -q kernel.bpf_stats_enabled="$stats0" || true
	rmdir "$target" "$other" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
mkdir "$target" "$other"

"$bin" agent --server http://127.0.0.1:1 --listen "$api" --discover=false --profilers "" \
	--kmetrics --kmetrics.push-interval 0 --log.level warn 2>"$work/agent.log" &
agent=$!
for _ in $(seq 100); do curl -sf "http://$api/api/v1/kmetrics" >/dev/null && break; sleep 0.1; done
kill -0 "$agent" 2>/dev/null || { echo "the agent did not start:" >&2; cat "$work/agent.log" >&2; exit 1; }

put() { curl -sS --fail-with-body -X PUT -H 'Content-Type: application/json' "http://$api/api/v1/kmetrics/config" -d "$1" >/dev/null; }
mode() { # off | targeted | untargeted (errors are fatal even inside $(run …))
	put "{\"container\":\"$target\",\"reset\":true}" || true
	put "{\"container\":\"$other\",\"reset\":true}" || true
	case $1 in
	targeted) put "{\"container\":\"$target\",\"metrics\":[\"all\"],\"enabled\":true,\"rate\":1}" || exit 1 ;;
	untargeted) put "{\"container\":\"$other\",\"metrics\":[\"all\"],\"enabled\":true,\"rate\":1}" || exit 1 ;;
	esac
	local attached
	attached=$(curl -sS "http://$api/api/v1/kmetrics" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["attached"]))')
	case $1 in off) [[ $attached == 0 ]] ;; *) [[ $attached == 13 ]] ;; esac || { echo "mode $1: $attached programs attached" >&2; exit 1; }
}

# in_cgroup CMD...: runs CMD inside the target cgroup.
in_cgroup() { sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$target" "$@"; }

bench=""
run() { # mode -> one line with loops_per_s (benchmark iterations per second)
	mode "$1"
	local out t
	case $bench in
	messaging)
		out=$(in_cgroup perf bench sched messaging -l "$mloops" 2>&1)
		t=$(sed -n 's/.*Total time: \([0-9.]*\).*/\1/p' <<<"$out")
		echo "mode=$1 bench=messaging total_s=$t loops_per_s=$(awk -v t="$t" -v l="$mloops" 'BEGIN{printf "%.1f", l/t}')"
		;;
	pipe)
		out=$(in_cgroup perf bench sched pipe -l "$ploops" 2>&1)
		t=$(sed -n 's/.*Total time: \([0-9.]*\).*/\1/p' <<<"$out")
		echo "mode=$1 bench=pipe total_s=$t loops_per_s=$(awk -v t="$t" -v l="$ploops" 'BEGIN{printf "%.1f", l/t}')"
		;;
	esac
}

echo "# machine: $(nproc) CPUs, $(uname -r), $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo)"
echo "# rounds=$rounds messaging_loops=$mloops pipe_loops=$ploops load=$(cut -d' ' -f1-3 /proc/loadavg)"
[[ $stats0 == 0 ]] || echo "# note: kernel.bpf_stats_enabled was $stats0 (someone else's); off for the timed pass, restored on exit"
sysctl -q kernel.bpf_stats_enabled=0
for bench in messaging pipe; do
	echo "## perf bench sched $bench"
	interleave "$rounds" off targeted untargeted
done

# BPF cost per event: run_time_ns / run_cnt per program, per mode.
progstats() { bpftool prog show -j | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    if p.get("name", "").startswith("km_"):
        print("%d:%s" % (p["id"], p["name"]), p.get("run_time_ns", 0), p.get("run_cnt", 0))'; }
# bench_cpu BENCH: user+system CPU seconds of one run of BENCH in the target cgroup.
bench_cpu() {
	local args
	case $1 in messaging) args="messaging -l $mloops" ;; pipe) args="pipe -l $ploops" ;; esac
	# shellcheck disable=SC2086
	bash -c 'echo $$ >"$0/cgroup.procs" && perf bench sched $1 >/dev/null 2>&1; times' "$target" "$args" | tail -1 |
		awk '{ split($1, u, "m"); split($2, s, "m"); printf "%.3f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }'
}
sysctl -q kernel.bpf_stats_enabled=1
for m in targeted untargeted; do
	mode "$m"
	before=$(progstats)
	cpu=0
	for b in messaging pipe; do cpu=$(awk -v a="$cpu" -v b="$(bench_cpu $b)" 'BEGIN{print a+b}'); done
	after=$(progstats)
	echo "## bpf_stats mode=$m (both benchmarks once)"
	# accounted_pct: CPU time in the km_* programs over the benchmarks' CPU time.
	join <(sort <<<"$before") <(sort <<<"$after") | awk -v cpu="$cpu" '{ dn = $4 - $2; dc = $5 - $3; tn += dn; tc += dc;
		if (dc > 0) printf "prog=%s runs=%d ns_per_run=%.1f\n", $1, dc, dn / dc }
		END { if (tc > 0) printf "prog=ALL runs=%d ns_per_run=%.1f bpf_cpu_s=%.3f bench_cpu_s=%.3f accounted_pct=%.2f\n", tc, tn / tc, tn / 1e9, cpu, 100 * tn / 1e9 / cpu }'
done
# kernel.bpf_stats_enabled is restored to its previous value on exit.

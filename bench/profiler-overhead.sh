#!/usr/bin/env bash
# Overhead of the agent's eBPF CPU sampler on a CPU-bound target, side by side with
# `perf record -F 99` and with nothing, interleaved in one run (issue 4 benchmark).
#
#   bench/profiler-overhead.sh [--rounds 3] [--duration 20s]
#
# Each round runs bench/spin (a Go hot loop printing loops/s) three times: alone; while
# `rootline agent --profilers cpu` samples it at 99 Hz; while `perf record -F 99 -g`
# samples it. Prints one line per run and the mean slowdown of each mode vs alone, plus
# the agent's own CPU seconds per second of sampling. Needs root (BPF) and linux-perf.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

rounds=3 duration=20s
while (($#)); do
	case $1 in
	--rounds) rounds=$2; shift 2 ;;
	--duration) duration=$2; shift 2 ;;
	*) echo "unknown option $1" >&2; exit 2 ;;
	esac
done
bin=${ROOTLINE_BIN:-./bin/rootline}
[[ -x $bin ]] || { echo "build first: make build" >&2; exit 1; }
command -v perf >/dev/null || { echo "perf not installed (apt-get install linux-perf)" >&2; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
go build -o "$work/spin" ./bench/spin

# A server for the agent to register with (no spans are sent).
"$bin" server --data-dir "$work/data" --otlp.grpc.addr 127.0.0.1:0 --otlp.http.addr 127.0.0.1:0 \
	--zipkin.addr 127.0.0.1:0 --query.addr 127.0.0.1:26686 --log.level warn &
pids+=($!)
sleep 1

run() { # mode -> loops/s
	local mode=$1 ready=$work/ready.$RANDOM out=$work/out.$RANDOM
	"$work/spin" --duration "$duration" --wait "$ready" >"$out" &
	local spid=$! helper="" c0=0
	case $mode in
	agent)
		"$bin" agent --server http://127.0.0.1:26686 --listen 127.0.0.1:0 --discover=false --profilers cpu \
			--target "pid=$spid,service=spin" --log.level warn &
		helper=$!
		sleep 2
		c0=$(cpu_s "$helper")
		;;
	perf)
		perf record -F 99 -g -p "$spid" -o "$work/perf.data" -q 2>/dev/null &
		helper=$!
		sleep 2
		;;
	esac
	touch "$ready"
	wait "$spid"
	local agent_cpu=""
	if [[ $mode == agent ]]; then agent_cpu=" agent_cpu_s=$(awk -v a="$(cpu_s "$helper")" -v b="$c0" 'BEGIN{printf "%.2f", a-b}')"; fi
	[[ -n $helper ]] && { kill -INT "$helper" 2>/dev/null || true; wait "$helper" 2>/dev/null || true; }
	echo "mode=$mode $(cat "$out")$agent_cpu"
}

interleave "$rounds" none agent perf

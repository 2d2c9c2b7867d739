#!/usr/bin/env bash
# Records the CPU profile of one kind of process of the demo mesh in each traced
# mode of a meshoverhead run, to compare where their CPU goes with and without a
# Rootline part (bench/RESULTS.md, "the read tracepoint's cost on the sidecars").
#
#   bench/mesh-perf.sh [PATTERN] [MODES]
#     PATTERN  pgrep -f pattern of the processes to record (default: the Envoys)
#     MODES    meshoverhead modes (default envoy,envoy+tracing,envoy+run); every
#              mode but the first (which starts no Rootline server) is recorded
#
# Output: /tmp/mesh-perf-<mode>.perf (perf report -i …), meshoverhead's table on
# stdout. Needs root, perf, bin/rootline (make build).
set -euo pipefail
cd "$(dirname "$0")/.."
pattern=${1:-envoy/_bin/envoy}
modes=${2:-envoy,envoy+tracing,envoy+run}
go build -o /tmp/mesh-perf-mo ./bench/meshoverhead
/tmp/mesh-perf-mo --rootline bin/rootline --rates 15 --duration 40s --rounds 1 --modes "$modes" &
bench=$!
prev=""
IFS=, read -ra ms <<<"$modes"
for mode in "${ms[@]:1}"; do
	# A traced mode starts its own server: wait for a new one, then for the load.
	for _ in $(seq 300); do
		srv=$(pgrep -f "rootline server --data-dir /tmp/meshoverhead" | head -1 || true)
		[[ -n $srv && $srv != "$prev" ]] && break
		sleep 1
	done
	prev=$srv
	sleep 25
	pids=$(pgrep -d, -f "$pattern")
	perf record -F 999 -g -o "/tmp/mesh-perf-$mode.perf" -p "$pids" -- sleep 15 >/dev/null 2>&1
	echo "# $mode: /tmp/mesh-perf-$mode.perf ($(date -u +%H:%M:%S))" >&2
done
wait $bench

#!/usr/bin/env bash
# bench/accuracy.sh — the diagnosis fault suite: how often Rootline's verdict
# names the service a fault was injected into and the cause that fault makes,
# how soon after the onset, and how many incidents open with nothing injected.
#
# Each run is one fault class × one service × one load level × one repeat, on
# the default ten-service mesh (internal/mesh/default.yaml: Go, Java and
# Python services) behind real Envoy sidecars, every service under `rootline
# run`, with the real server and agent (`rootline demo`). Ground truth per run:
# the service, the expected cause (mesh.ExpectedCause) and the onset time.
# The verdict is the server's incident read back from its API.
#
# The mesh starts once per load level (a fresh mesh per run takes minutes
# here): one `rootline demo` gets every pending run of that level as --fault
# arguments, fault-free stretches first. Runs are isolated in time: before
# each fault the demo sends baseline load until the server has no incident
# open (the previous fault's has closed: its rule needs diagnosis.quiet of
# quiet), then a baseline of min(--duration, 20 s); after each fault, a
# recovery of --duration at the same rate. Each run's result lands in
# OUT/runs/<run>.json as soon as it is known (with the verdict as it changed
# after the onset, "timeline", and the fault's service's captures from 40 s
# before it, "captures": why a cause came when it did); a run whose JSON exists is
# skipped, so an interrupted suite resumes where it stopped. At the end
# `go run ./bench/accuracy OUT` writes OUT/summary.md and OUT/summary.json.
#
# Usage: bench/accuracy.sh [--quick] [--runs N] [--classes a,b] [--services x,y]
#          [--rates r1,r2] [--duration D] [--fault-free D] [--out DIR]
#          [--prefix P] [--subnet S] [--demo-args "A"] [--dry-run]
#   --runs N         repeats of each (class, service, rate) cell (default 2)
#   --classes        fault classes (default: every class with a measurable cause)
#   --services       target services (default e,b,f: Java, Python, Go)
#   --rates          load levels in requests/s to the entry (default 8,15)
#   --duration       how long each fault stays on (default 30s)
#   --fault-free     length of the fault-free stretch per load level (default 5m:
#                    10 min over the two levels)
#   --quick          1 repeat, rate 15, classes lock,cpu-throttle,disk,net-delay,
#                    services e,b,f, fault-free 1m, duration 20s
#   --out DIR        results (default bench/accuracy/out)
#   --prefix/--subnet  the demo mesh's (default acc, 10.78.0.0/24), so that it
#                    does not collide with another mesh on the machine
#   --rotate         one service per (class, rate, repeat) instead of every service,
#                    rotating through --services (a smaller matrix that still puts
#                    every class on several languages)
#   --demo-args "A"  more flags for `rootline demo` (e.g. "--spans run")
#   --dry-run        print the runs and the demo commands only
# Needs root (pod mode, cgroups, tc) and `make build`.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=2
classes="lock,cpu-throttle,cpu-hog,net-bandwidth,net-delay,packet-loss,gc,noisy-neighbour,disk,cpu"
services="e,b,f"
rates="8,15"
duration=30s
free=5m
out=bench/accuracy/out
prefix=acc
subnet=10.78.0.0/24
dry=0
rotate=0
demo_args=""
while [ $# -gt 0 ]; do
	case "$1" in
	--runs) runs=$2; shift ;;
	--classes) classes=$2; shift ;;
	--services) services=$2; shift ;;
	--rates) rates=$2; shift ;;
	--duration) duration=$2; shift ;;
	--fault-free) free=$2; shift ;;
	--out) out=$2; shift ;;
	--prefix) prefix=$2; shift ;;
	--subnet) subnet=$2; shift ;;
	--quick) runs=1; rates=15; classes="lock,cpu-throttle,disk,net-delay"; services="e,b,f"; free=1m; duration=20s ;;
	--dry-run) dry=1 ;;
	--rotate) rotate=1 ;;
	--demo-args) demo_args=$2; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "accuracy: unknown option $1 (see --help)" >&2; exit 2 ;;
	esac
	shift
done

bin=${ROOTLINE_BIN:-$PWD/bin/rootline}
if [ "$dry" = 0 ]; then
	[ -x "$bin" ] || { echo "accuracy: $bin missing: run make build" >&2; exit 1; }
	[ "$(id -u)" = 0 ] || { echo "accuracy: needs root (pod mode, cgroups, tc)" >&2; exit 1; }
fi
mkdir -p "$out/runs" "$out/logs"

# amount CLASS SERVICE: the amount a fault class gets, the same for every
# service: large enough to matter at both rates on this 2-CPU machine, where
# the mesh already uses most of it (a slowdown too small to matter should
# open no incident, and is not what this suite measures).
amount() {
	case "$1" in
	lock) echo 20ms ;;
	cpu-throttle) echo 5% ;;
	cpu-hog) echo 2 ;;
	net-bandwidth) echo 64kbit ;;
	net-delay) echo 100ms ;;
	gc) echo 8MB ;;
	disk) echo 8MB ;;
	cpu) echo 20ms ;;
	packet-loss) echo 10% ;;
	noisy-neighbour) echo 2 ;;
	*) echo "" ;;
	esac
}

IFS=, read -r -a rate_list <<<"$rates"
IFS=, read -r -a class_list <<<"$classes"
IFS=, read -r -a svc_list <<<"$services"
total=0
done_runs=0
for ri in "${!rate_list[@]}"; do
	rate=${rate_list[$ri]}
	ids=()
	faults=()
	id="none.r$rate"
	total=$((total + 1))
	if [ -e "$out/runs/$id.json" ]; then done_runs=$((done_runs + 1)); else ids+=("$id"); faults+=("none=$free"); fi
	for rep in $(seq 1 "$runs"); do
		for ci in "${!class_list[@]}"; do
			class=${class_list[$ci]}
			targets=("${svc_list[@]}")
			if [ "$rotate" = 1 ]; then
				targets=("${svc_list[$(((ci + ri + rep - 1) % ${#svc_list[@]}))]}")
			fi
			for svc in "${targets[@]}"; do
				a=$(amount "$class")
				f="$class@$svc${a:+=$a}"
				id="$class@$svc.r$rate.$rep"
				total=$((total + 1))
				if [ -e "$out/runs/$id.json" ]; then
					done_runs=$((done_runs + 1))
					continue
				fi
				ids+=("$id")
				faults+=("$f")
			done
		done
	done
	echo "accuracy: rate $rate/s: ${#ids[@]} runs to do (${ids[*]:-none})"
	[ ${#ids[@]} -gt 0 ] || continue
	# The default mesh, warmed up at the run's rate (half of it, then it)
	# rather than the default phases, which go past what this machine
	# serves: the detector learns the latency of the load it will judge.
	topo="$out/topology-r$rate.yaml"
	sed '/^load:/,$d' internal/mesh/default.yaml >"$topo"
	printf 'load:\n  - {rate: %s, duration: 20s}\n  - {rate: %s, duration: 40s}\n' "$(awk -v r="$rate" 'BEGIN{print r/2}')" "$rate" >>"$topo"
	args=(demo --topology "$topo" --duration "$duration" --rate "$rate" --query.addr 127.0.0.1:0 --prefix "$prefix" --subnet "$subnet")
	for f in "${faults[@]}"; do args+=(--fault "$f"); done
	# shellcheck disable=SC2206 # word splitting of the extra flags is meant
	[ -n "$demo_args" ] && args+=($demo_args)
	if [ "$dry" = 1 ]; then
		echo "  $bin ${args[*]}"
		continue
	fi
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/accuracy.XXXXXX")
	log="$out/logs/rate$rate-$(date -u +%Y%m%dT%H%M%SZ).log"
	echo "accuracy: rate $rate/s: rootline demo with ${#faults[@]} faults (log $log)"
	# Move each result to its run's name as soon as the demo writes it, so
	# that what finished survives an interrupted demo.
	(
		while :; do
			for i in "${!ids[@]}"; do
				src="$tmp/fault-$((i + 1)).json"
				if [ -e "$src" ]; then
					mv "$src" "$out/runs/${ids[$i]}.json"
					echo "accuracy: done ${ids[$i]}: $(grep -o '"causeCorrect": [a-z]*' "$out/runs/${ids[$i]}.json" | head -1)"
				fi
			done
			sleep 2
		done
	) &
	mover=$!
	set +e
	"$bin" "${args[@]}" --results-dir "$tmp" >"$log" 2>&1 &
	demo=$!
	# Progress: the demo's phase lines.
	tail -n +1 -F "$log" 2>/dev/null | grep --line-buffered -E '^phase:|^rootline demo:|check:' &
	tailer=$!
	wait "$demo"
	rc=$?
	set -e
	sleep 3
	kill "$mover" "$tailer" 2>/dev/null || true
	wait "$mover" "$tailer" 2>/dev/null || true
	for i in "${!ids[@]}"; do
		src="$tmp/fault-$((i + 1)).json"
		[ -e "$src" ] && mv "$src" "$out/runs/${ids[$i]}.json"
	done
	rm -rf "$tmp"
	# Exit status 1 is a wrong verdict, which the summary reports; others
	# are the demo failing.
	if [ "$rc" -gt 1 ]; then
		echo "accuracy: the demo failed (exit $rc); see $log" >&2
	fi
done
[ "$dry" = 1 ] && exit 0
echo "accuracy: $total runs in the matrix, $(ls "$out/runs" | wc -l) with results"
go run ./bench/accuracy "$out"

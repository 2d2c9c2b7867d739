#!/usr/bin/env bash
# Overhead of the kernel flight recorder (issue 7, "kernel" profiler) and of the
# per-container kernel metrics (issue 7, `rootline agent --kmetrics`), alone and
# together, on scheduler-heavy work, interleaved in one run.
#
#   bench/kernel-overhead.sh [--rounds 5] [--modes "off targeted untargeted"]
#                            [--messaging-loops 200] [--pipe-loops 200000]
#                            [--no-stats] [--no-rate]
#
#   e.g. bench/kernel-overhead.sh --rounds 5 --modes "off recorder metrics both"
#
# Each round runs `perf bench sched messaging` and `perf bench sched pipe` once
# per mode, the modes rotated from round to round. A mode is a command prefix
# (mode_prefix below) that runs the benchmark:
#   off         nothing loaded
#   targeted    the recorder loaded, the benchmark's process tree its target
#   untargeted  the recorder loaded and attached, targeting another (idle) process
#   empty       no recorder: a program that returns at once on each of the
#               recorder's tracepoints (the floor any tracepoint program costs)
#   targeted-hooks, untargeted-hooks
#               the same with Config.SyscallHooks (syscalls tracked with
#               raw_syscalls sys_enter/sys_exit instead of saved registers)
#   targeted-nofollow
#               targeted, wakers not followed (Config.FollowDepth -1: the
#               recorder before it followed wakers)
#   waker       only the benchmark's first process is the target (no
#               following of forks); the processes it forks are recorded as
#               followed wakers once they wake it (pipe: the other end)
#   waker-nofollow
#               the same without following: the other processes unrecorded
#   all         every task on the machine recorded (Config.All: what a
#               whole-machine switch/wakeup recording would cost)
#   recorder    = targeted
#   metrics     the kernel metrics loaded (internal/kmetrics, what the agent's
#               --kmetrics loads), all 14 metrics enabled 1-in-1 for the
#               benchmark's cgroup: all 13 km_* programs attached, every event
#               of the benchmark recorded; the recorder not loaded
#   both        recorder targeted + metrics targeted
#   metrics-untargeted, both-untargeted
#               the same, the metrics enabled for another (empty) cgroup and
#               the recorder (if loaded) targeting another process
# The prefix is internal/profiler/kernel/testdata/krecord, which loads the
# recorder and/or the metrics, starts the benchmark gated on its stdin, moves
# it into a cgroup v2 of its own (in every mode, so that they compare alike),
# registers it, then releases it; with the metrics loaded it reads them once a
# second while the benchmark runs. To add a mode, add a case to mode_prefix and
# name it in --modes; the first mode is the baseline. MODE@PATH runs MODE
# with the krecord binary at PATH (e.g. targeted@/tmp/krecord-old: two
# builds side by side).
#
# Each round starts with a "# round=N" line giving the time and the load
# average (so do the later passes). The summary is, per mode,
# the mean (and median) benchmark time and its slowdown against the baseline,
# and the mean, median, min and max CPU time of the benchmark's processes
# (user+sys, where the BPF programs' run time is charged) and the mean's and
# median's increase: on a busy machine the CPU figure is the steadier one. A
# second pass with kernel.bpf_stats_enabled=1 (off during the timed pass: it
# costs two clock reads per program run) prints, per mode other than off and
# benchmark, bpftool's run_time_ns / run_cnt summed over the recorder's sr_*
# programs and over the metrics' km_* programs (krecord counts only the
# programs it loaded), the sr_* time divided by the records written to the ring
# buffer, and the programs' run time as a share of the benchmark's CPU time
# (accounted_pct). A last pass measures the loading process's CPU (in the
# benchmark's window, and in total with loading) and max RSS at ~100 k
# scheduler events/s (testdata/workload.c pingpong): the recorder alone (then
# the dump of the window), and recorder + metrics if "both" is in --modes.
# KRECORD_BIN=path uses that krecord binary instead of building one.
# Needs root, BPF, cgroup v2 (for the metrics), linux-perf, bpftool and gcc.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=5 mloops=200 ploops=200000 modes="off targeted untargeted" stats=1 rate=1
while (($#)); do
	case $1 in
	--rounds) rounds=$2; shift 2 ;;
	--modes) modes=$2; shift 2 ;;
	--messaging-loops) mloops=$2; shift 2 ;;
	--pipe-loops) ploops=$2; shift 2 ;;
	--no-stats) stats=0; shift ;;
	--no-rate) rate=0; shift ;;
	*) echo "unknown option $1" >&2; exit 2 ;;
	esac
done
for tool in perf bpftool gcc; do
	command -v $tool >/dev/null || { echo "$tool not installed (scripts/deps.sh)" >&2; exit 1; }
done
work=$(mktemp -d)
stats0=$(sysctl -n kernel.bpf_stats_enabled)
cleanup() {
	sysctl -q kernel.bpf_stats_enabled="$stats0" || true
	rm -rf "$work"
}
trap cleanup EXIT
sysctl -q kernel.bpf_stats_enabled=0
if [[ -n ${KRECORD_BIN:-} ]]; then # a krecord built earlier (e.g. while the tree does not build)
	cp "$KRECORD_BIN" "$work/krecord"
else
	go build -o "$work/krecord" ./internal/profiler/kernel/testdata/krecord
fi
gcc -O1 -pthread -o "$work/workload" internal/profiler/kernel/testdata/workload.c

# mode_prefix MODE: the command prefix that runs a benchmark under MODE.
# MODE@PATH: the same mode with the krecord binary at PATH (another build,
# to compare two builds side by side in one run).
mode_prefix() {
	if [[ $1 == *@* ]]; then
		local p
		p=$(mode_prefix "${1%%@*}") || return
		echo "${1#*@}${p#"$work/krecord"}"
		return
	fi
	case $1 in
	off | targeted | untargeted | empty) echo "$work/krecord -mode $1 --" ;;
	# Syscalls tracked with raw_syscalls sys_enter/sys_exit (Config.SyscallHooks).
	targeted-hooks | untargeted-hooks) echo "$work/krecord -syscall-hooks -mode ${1%-hooks} --" ;;
	recorder) echo "$work/krecord -mode targeted --" ;;
	targeted-nofollow) echo "$work/krecord -mode targeted -follow-depth -1 --" ;;
	waker) echo "$work/krecord -mode targeted -no-follow-forks --" ;;
	waker-nofollow) echo "$work/krecord -mode targeted -no-follow-forks -follow-depth -1 --" ;;
	all) echo "$work/krecord -mode targeted -all --" ;;
	# Kernel metrics: all metrics 1-in-1 for the benchmark's cgroup (or another).
	metrics) echo "$work/krecord -mode off -kmetrics targeted --" ;;
	both) echo "$work/krecord -mode targeted -kmetrics targeted --" ;;
	metrics-untargeted) echo "$work/krecord -mode off -kmetrics untargeted --" ;;
	both-untargeted) echo "$work/krecord -mode untargeted -kmetrics untargeted --" ;;
	*) echo "unknown mode $1 (add it to mode_prefix)" >&2; return 2 ;;
	esac
}

bench_cmd() {
	case $1 in
	messaging) echo "perf bench sched messaging -l $mloops" ;;
	pipe) echo "perf bench sched pipe -l $ploops" ;;
	esac
}

# run BENCH MODE: runs it once; prints "bench=… mode=… seconds=… cpu_s=…"
# (the benchmark's own total time, and the CPU time of its processes, where
# BPF run time is charged) and keeps krecord's report in $work/err.
run() {
	local out secs cpu
	# shellcheck disable=SC2046
	out=$($(mode_prefix "$2") $(bench_cmd "$1") 2>"$work/err")
	secs=$(sed -n 's/.*Total time: *\([0-9.]*\) \[sec\].*/\1/p' <<<"$out")
	cpu=$(sed -n 's/^krecord child cpu_s=\([0-9.]*\).*/\1/p' "$work/err")
	[[ -n $secs ]] || { echo "no time in: $out $(cat "$work/err")" >&2; return 1; }
	echo "bench=$1 mode=$2 seconds=$secs cpu_s=${cpu:-0}"
}

echo "# $(date -u +%FT%TZ) $(uname -r) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# rounds=$rounds modes=($modes) messaging: $(bench_cmd messaging); pipe: $(bench_cmd pipe)"
read -r -a mode_list <<<"$modes"
for m in "${mode_list[@]}"; do mode_prefix "$m" >/dev/null; done
# vals[bench.mode] / cvals[bench.mode]: the rounds' seconds / CPU seconds.
declare -A vals=() cvals=()
for r in $(seq 1 "$rounds"); do
	echo "# round=$r $(date -u +%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
	# Rotate the order so that no mode always runs first or last.
	k=$(((r - 1) % ${#mode_list[@]}))
	order=("${mode_list[@]:k}" "${mode_list[@]:0:k}")
	for b in messaging pipe; do
		for m in "${order[@]}"; do
			line=$(run "$b" "$m")
			echo "round=$r $line"
			vals[$b.$m]+=" $(sed -n 's/.*seconds=\([0-9.]*\).*/\1/p' <<<"$line")"
			cvals[$b.$m]+=" $(sed -n 's/.*cpu_s=\([0-9.]*\).*/\1/p' <<<"$line")"
		done
	done
done
echo "# end of the timed pass $(date -u +%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
# stats_of VALUES…: "mean median min max"
stats_of() { tr ' ' '\n' <<<"$*" | sed '/^$/d' | sort -g | awk '{v[NR] = $1; s += $1}
	END { printf "%.4f %.4f %.4f %.4f\n", s / NR, NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[1], v[NR] }'; }
base=${mode_list[0]}
((rounds > 0)) && for b in messaging pipe; do
	read -r bm bmed _ _ < <(stats_of "${vals[$b.$base]}")
	read -r bc bcmed _ _ < <(stats_of "${cvals[$b.$base]}")
	for m in "${mode_list[@]}"; do
		read -r mean med _ _ < <(stats_of "${vals[$b.$m]}")
		read -r cm cmed cmin cmax < <(stats_of "${cvals[$b.$m]}")
		awk -v b="$b" -v m="$m" -v mean="$mean" -v med="$med" -v base="$bm" -v bmed="$bmed" \
			-v cm="$cm" -v cmed="$cmed" -v cmin="$cmin" -v cmax="$cmax" -v cbase="$bc" -v cbmed="$bcmed" 'BEGIN{
			printf "summary bench=%s mode=%s mean_s=%.4f slowdown_pct=%.2f median_s=%.4f median_slowdown_pct=%.2f mean_cpu_s=%.4f cpu_overhead_pct=%.2f median_cpu_s=%.4f median_cpu_overhead_pct=%.2f cpu_min_s=%.4f cpu_max_s=%.4f\n",
				b, m, mean, 100*(mean-base)/base, med, 100*(med-bmed)/bmed, cm, 100*(cm-cbase)/cbase, cmed, 100*(cmed-cbmed)/cbmed, cmin, cmax }'
	done
done

if ((stats)); then
	sysctl -q kernel.bpf_stats_enabled=1
	echo "# bpf_stats pass $(date -u +%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
	for m in "${mode_list[@]}"; do
		[[ $m == off ]] && continue
		for b in messaging pipe; do
			line=$(run "$b" "$m")
			cpu=$(sed -n 's/.*cpu_s=\([0-9.]*\).*/\1/p' <<<"$line")
			st=$(grep 'krecord stats' "$work/err" || true)
			ev=$(sed -n 's/.* events=\([0-9]*\).*/\1/p' <<<"$st")
			all_rt=0 all_cnt=0
			for fam in sr_ km_; do
				tot=$(grep "krecord bpftool total prefix=$fam " "$work/err" || true)
				[[ -n $tot ]] || continue
				rt=$(sed -n 's/.*run_time_ns=\([0-9]*\).*/\1/p' <<<"$tot")
				cnt=$(sed -n 's/.*run_cnt=\([0-9]*\).*/\1/p' <<<"$tot")
				all_rt=$((all_rt + rt)) all_cnt=$((all_cnt + cnt))
				awk -v b="$b" -v m="$m" -v f="$fam" -v rt="$rt" -v cnt="$cnt" -v ev="${ev:-0}" -v cpu="$cpu" 'BEGIN{
					printf "bpf bench=%s mode=%s progs=%s* runs=%d run_time_ms=%.1f ns_per_run=%.1f", b, m, f, cnt, rt/1e6, cnt ? rt/cnt : 0
					if (f == "sr_") printf " records=%d ns_per_record=%s", ev, ev ? sprintf("%.1f", rt/ev) : "-"
					printf " accounted_pct=%.2f\n", (cpu > 0 ? 100*rt/1e9/cpu : 0) }'
			done
			awk -v b="$b" -v m="$m" -v rt="$all_rt" -v cnt="$all_cnt" -v cpu="$cpu" 'BEGIN{
				if (cnt) printf "bpf bench=%s mode=%s progs=all runs=%d run_time_ms=%.1f ns_per_run=%.1f bench_cpu_s=%.3f accounted_pct=%.2f\n",
					b, m, cnt, rt/1e6, rt/cnt, cpu, (cpu > 0 ? 100*rt/1e9/cpu : 0) }'
			grep 'krecord bpftool prog=' "$work/err" | sed "s|^krecord bpftool |bpf-prog bench=$b mode=$m |"
		done
	done
	sysctl -q kernel.bpf_stats_enabled=0
fi

if ((rate)); then
	# ~100 k records/s: 34 k round trips/s ≈ 3 records each (switches and
	# wakings; sched_wakeup is not recorded by default). The recorder alone,
	# then the dump of the whole 10 s window (after the CPU/RSS line); then,
	# if "both" is a mode, recorder + metrics (no dump).
	echo "# rate pass $(date -u +%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
	"$work/krecord" -mode targeted -dump -- "$work/workload" pingpong 34000 10 2>&1 >/dev/null |
		grep -E 'krecord (stats|dump|follow)' | sed 's/^krecord /rate mode=recorder /'
	# The same ping-pong between two processes, one the target: the other
	# end followed as a waker, or not; and idle (10 s with the target
	# asleep) as targeted and with every task recorded.
	for m in waker waker-nofollow; do
		echo "# rate pass ($m) $(date -u +%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
		# shellcheck disable=SC2046
		$(mode_prefix $m) "$work/workload" pingpong 34000 10 fork 2>&1 >/dev/null |
			grep -E 'krecord (stats|follow)' | sed "s/^krecord /rate mode=$m /"
	done
	for m in targeted all; do
		echo "# idle pass ($m) $(date -u +%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
		# shellcheck disable=SC2046
		$(mode_prefix $m | sed 's/ --$//') -idle 10s -- true 2>&1 >/dev/null |
			grep -E 'krecord idle' | sed "s/^krecord /idle mode=$m /"
	done
	if [[ " $modes " == *" both "* ]]; then
		echo "# rate pass (both) $(date -u +%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
		"$work/krecord" -mode targeted -kmetrics targeted -- "$work/workload" pingpong 34000 10 2>&1 >/dev/null |
			grep -E 'krecord (stats|kmetrics reads)' | sed 's/^krecord /rate mode=both /'
	fi
fi

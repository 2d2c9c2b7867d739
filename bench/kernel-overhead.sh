#!/usr/bin/env bash
# Overhead of the kernel flight recorder (issue 7, "kernel" profiler) on
# scheduler-heavy work, interleaved in one run.
#
#   bench/kernel-overhead.sh [--rounds 5] [--modes "off targeted untargeted"]
#                            [--messaging-loops 200] [--pipe-loops 200000]
#                            [--no-stats] [--no-rate]
#
# Each round runs `perf bench sched messaging` and `perf bench sched pipe` once
# per mode, the modes rotated from round to round. A mode is a command prefix
# (mode_prefix below) that runs the benchmark:
#   off         no recorder loaded
#   targeted    the recorder loaded, the benchmark's process tree its target
#   untargeted  the recorder loaded and attached, targeting another (idle) process
#   targeted-hooks, untargeted-hooks
#               the same with Config.SyscallHooks (syscalls tracked with
#               raw_syscalls sys_enter/sys_exit instead of saved registers)
# The prefix is internal/profiler/kernel/testdata/krecord, which loads the
# recorder, starts the benchmark gated on its stdin, registers it, then
# releases it. To add a mode (e.g. kernel metrics on, or both), add a case to
# mode_prefix and name it in --modes; the first mode is the baseline.
#
# The summary is, per mode, the mean benchmark time and its slowdown against
# the baseline, and the mean CPU time of the benchmark's processes (user+sys,
# where the BPF programs' run time is charged) and its increase: on a busy
# machine the CPU figure is the steadier one. A second pass with kernel.bpf_stats_enabled=1 (off during the
# timed pass: it costs two clock reads per program run) prints, per mode and
# benchmark, bpftool's run_time_ns / run_cnt summed over the recorder's sr_*
# programs, and that time divided by the records written to the ring buffer.
# A last run measures the recorder process's CPU and RSS at ~100 k scheduler
# events/s (testdata/workload.c pingpong). Needs root, BPF, linux-perf,
# bpftool and gcc.
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
go build -o "$work/krecord" ./internal/profiler/kernel/testdata/krecord
gcc -O1 -pthread -o "$work/workload" internal/profiler/kernel/testdata/workload.c

# mode_prefix MODE: the command prefix that runs a benchmark under MODE.
mode_prefix() {
	case $1 in
	off | targeted | untargeted) echo "$work/krecord -mode $1 --" ;;
	# Syscalls tracked with raw_syscalls sys_enter/sys_exit (Config.SyscallHooks).
	targeted-hooks | untargeted-hooks) echo "$work/krecord -syscall-hooks -mode ${1%-hooks} --" ;;
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
declare -A sum=() csum=() n=()
for r in $(seq 1 "$rounds"); do
	# Rotate the order so that no mode always runs first or last.
	k=$(((r - 1) % ${#mode_list[@]}))
	order=("${mode_list[@]:k}" "${mode_list[@]:0:k}")
	for b in messaging pipe; do
		for m in "${order[@]}"; do
			line=$(run "$b" "$m")
			echo "round=$r $line"
			v=$(sed -n 's/.*seconds=\([0-9.]*\).*/\1/p' <<<"$line")
			c=$(sed -n 's/.*cpu_s=\([0-9.]*\).*/\1/p' <<<"$line")
			sum[$b.$m]=$(awk -v a="${sum[$b.$m]:-0}" -v b="$v" 'BEGIN{print a+b}')
			csum[$b.$m]=$(awk -v a="${csum[$b.$m]:-0}" -v b="$c" 'BEGIN{print a+b}')
			n[$b.$m]=$((${n[$b.$m]:-0} + 1))
		done
	done
done
base=${mode_list[0]}
((rounds > 0)) && for b in messaging pipe; do
	bm=$(awk -v s="${sum[$b.$base]}" -v n="${n[$b.$base]}" 'BEGIN{print s/n}')
	bc=$(awk -v s="${csum[$b.$base]}" -v n="${n[$b.$base]}" 'BEGIN{print s/n}')
	for m in "${mode_list[@]}"; do
		awk -v s="${sum[$b.$m]}" -v c="${csum[$b.$m]}" -v n="${n[$b.$m]}" -v base="$bm" -v cbase="$bc" -v b="$b" -v m="$m" \
			'BEGIN{mean=s/n; cm=c/n; printf "summary bench=%s mode=%s mean_s=%.4f slowdown_pct=%.2f mean_cpu_s=%.4f cpu_overhead_pct=%.2f\n", b, m, mean, 100*(mean-base)/base, cm, 100*(cm-cbase)/cbase}'
	done
done

if ((stats)); then
	sysctl -q kernel.bpf_stats_enabled=1
	for m in "${mode_list[@]}"; do
		[[ $m == off ]] && continue
		for b in messaging pipe; do
			run "$b" "$m" >/dev/null
			tot=$(grep 'krecord bpftool total' "$work/err" || true)
			st=$(grep 'krecord stats' "$work/err" || true)
			rt=$(sed -n 's/.*run_time_ns=\([0-9]*\).*/\1/p' <<<"$tot")
			cnt=$(sed -n 's/.*run_cnt=\([0-9]*\).*/\1/p' <<<"$tot")
			ev=$(sed -n 's/.* events=\([0-9]*\).*/\1/p' <<<"$st")
			awk -v b="$b" -v m="$m" -v rt="${rt:-0}" -v cnt="${cnt:-0}" -v ev="${ev:-0}" 'BEGIN{
				printf "bpf bench=%s mode=%s runs=%d run_time_ms=%.1f ns_per_run=%.1f records=%d ns_per_record=%s\n",
					b, m, cnt, rt/1e6, cnt ? rt/cnt : 0, ev, ev ? sprintf("%.1f", rt/ev) : "-" }'
			grep 'krecord bpftool prog=' "$work/err" | sed "s/^krecord bpftool /bpf-prog bench=$b mode=$m /"
		done
	done
	sysctl -q kernel.bpf_stats_enabled=0
fi

if ((rate)); then
	# ~100 k records/s: 34 k round trips/s ≈ 3 records each (switches and
	# wakings; sched_wakeup is not recorded by default). The dump of the
	# whole 10 s window comes after the CPU/RSS line.
	"$work/krecord" -mode targeted -dump -- "$work/workload" pingpong 34000 10 2>&1 >/dev/null |
		grep -E 'krecord (stats|dump)' | sed 's/^krecord /rate /'
fi

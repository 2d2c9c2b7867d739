#!/usr/bin/env bash
# Overhead of a continuous JFR recording on a CPU-bound JVM (issue 4 benchmark):
# JSpin's throughput with no recording, with JFR's "default" settings and with its
# "profile" settings (what `rootline agent` starts), interleaved in one run.
#
#   bench/jfr-overhead.sh [--rounds 3] [--duration 15]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3 duration=15
while (($#)); do
	case $1 in
	--rounds) rounds=$2; shift 2 ;;
	--duration) duration=$2; shift 2 ;;
	*) echo "unknown option $1" >&2; exit 2 ;;
	esac
done
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
javac -d "$work" bench/jspin/JSpin.java

run() { # mode -> line
	local mode=$1 go=$work/go.$RANDOM out=$work/out.$RANDOM
	mkfifo "$out.fifo"
	java -Xmx256m -cp "$work" JSpin "$duration" "$go" >"$out.fifo" &
	local pid=$!
	exec 3<"$out.fifo"
	read -r _ <&3 # ready
	if [[ $mode != none ]]; then
		jcmd "$pid" JFR.start name=bench settings="$mode" maxage=120s maxsize=64m >/dev/null
	fi
	touch "$go"
	local line
	read -r line <&3
	exec 3<&-
	wait "$pid" || true
	echo "mode=$mode $line"
}
declare -A sum=() n=()
for r in $(seq 1 "$rounds"); do
	for mode in none default profile; do
		line=$(run "$mode")
		echo "round=$r $line"
		v=$(sed -n 's/.*loops_per_s=\([0-9.]*\).*/\1/p' <<<"$line")
		sum[$mode]=$(awk -v a="${sum[$mode]:-0}" -v b="$v" 'BEGIN{print a+b}')
		n[$mode]=$((${n[$mode]:-0} + 1))
	done
done
base=$(awk -v s="${sum[none]}" -v n="${n[none]}" 'BEGIN{print s/n}')
for mode in default profile; do
	m=$(awk -v s="${sum[$mode]}" -v n="${n[$mode]}" 'BEGIN{print s/n}')
	awk -v m="$m" -v b="$base" -v mode="$mode" 'BEGIN{printf "summary settings=%s mean_loops_per_s=%.1f baseline=%.1f slowdown_pct=%.2f\n", mode, m, b, 100*(b-m)/b}'
done

# Shared helpers of the overhead scripts under bench/ (sourced, not run).

# cpu_s PID: user+system CPU seconds of a process so far.
cpu_s() { awk -v t="$(getconf CLK_TCK)" '{ s = $0; sub(/^.*\) /, "", s); split(s, f, " "); printf "%.2f", (f[12] + f[13]) / t }' "/proc/$1/stat"; }

# interleave ROUNDS MODE... : calls `run MODE` (defined by the caller, printing a
# line with loops_per_s=N) for every mode in every round, prints each line, then
# the mean throughput of each mode after the first against the first (baseline).
interleave() {
	local rounds=$1
	shift
	local -A sum=() n=()
	local r mode line v
	for r in $(seq 1 "$rounds"); do
		for mode in "$@"; do
			line=$(run "$mode")
			echo "round=$r $line"
			v=$(sed -n 's/.*loops_per_s=\([0-9.]*\).*/\1/p' <<<"$line")
			sum[$mode]=$(awk -v a="${sum[$mode]:-0}" -v b="$v" 'BEGIN{print a+b}')
			n[$mode]=$((${n[$mode]:-0} + 1))
		done
	done
	local base_mode=$1 base m
	base=$(awk -v s="${sum[$base_mode]}" -v n="${n[$base_mode]}" 'BEGIN{print s/n}')
	shift
	for mode in "$@"; do
		m=$(awk -v s="${sum[$mode]}" -v n="${n[$mode]}" 'BEGIN{print s/n}')
		awk -v m="$m" -v b="$base" -v mode="$mode" 'BEGIN{printf "summary mode=%s mean_loops_per_s=%.1f baseline=%.1f slowdown_pct=%.2f\n", mode, m, b, 100*(b-m)/b}'
	done
}

#!/usr/bin/env bash
# The autoscaling experiment of CriticalMetrics (docs/critical-metrics.md,
# ViperProbe §5.4, Table 4 and Figure 14): replicas of the demo mesh's Go
# service (demo/services/go, WORK=cpu=2.5ms of CPU time per request) in
# CPU-limited cgroups behind a real Envoy, the same load ramp once per
# policy, an autoscaler scaling on the replicas' CPU utilisation or on their
# run-queue latency from the kernel metrics' BPF programs.
#
#   bench/autoscale.sh [--figure FILE.png] [driver flags…]
#   bench/autoscale.sh --help        # every flag of the driver
#
# Builds the demo services (make demo-services) and the driver
# (bench/autoscale), and runs the driver, which prints its progress
# and the table (failure rate, p50/p95/p99, mean replicas, replica-minutes,
# replica CPU-seconds per run) and writes results.json and table.md to its
# --out directory; then draws the Figure 14 analogue (replicas, p95,
# failures and both signals over time per policy) to plot.png there with
# matplotlib from the project's venv (scripts/deps.sh installs it), and
# copies it to --figure when given. About 4 min per run with the default
# ramp: `--repeats 2` (the default here) is 15 min. Needs root (cgroups, BPF)
# and Envoy (scripts/deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

figure=
args=()
repeats_given=
while (($#)); do
	case $1 in
	--figure) figure=$2; shift 2 ;;
	-h | --help | -help)
		sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
		go run ./bench/autoscale --help 2>&1 || true
		exit 0 ;;
	--out) out=$2; args+=("$1" "$2"); shift 2 ;;
	--out=*) out=${1#--out=}; args+=("$1"); shift ;;
	--repeats | --repeats=*) repeats_given=1; args+=("$1"); shift ;;
	*) args+=("$1"); shift ;;
	esac
done
[[ -n $repeats_given ]] || args+=(--repeats 2)
: "${out:=$(mktemp -d /tmp/rootline-autoscale.XXXXXX)}"
[[ " ${args[*]} " == *" --out"* ]] || args+=(--out "$out")

venv=${ROOTLINE_VENV:-$HOME/.cache/rootline/venv}
if ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
	echo "autoscale.sh: no matplotlib in $venv (run scripts/deps.sh)" >&2
	exit 1
fi
bin=$(mktemp -d)/autoscale
trap 'rm -rf "$(dirname "$bin")"' EXIT
echo "autoscale.sh: building the demo services and bench/autoscale"
make --no-print-directory -s demo-services
go build -o "$bin" ./bench/autoscale
echo "autoscale.sh: $(date -u +%FT%TZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), kernel $(uname -r)"
"$bin" "${args[@]}"
"$venv/bin/python" bench/autoscale/plot.py "$out/results.json" "$out/plot.png"
echo "autoscale.sh: figure $out/plot.png"
if [[ -n $figure ]]; then
	cp "$out/plot.png" "$figure"
	echo "autoscale.sh: copied to $figure"
fi

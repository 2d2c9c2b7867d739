#!/usr/bin/env bash
# Figures 5.4 and 5.5 of "Aggregated tracing model for MirageOS unikernels"
# (§5.3) on Rootline: the waits of the Mirage model as a CPU limit or a link
# limit at the backend of a three-service chain tightens.
#
#   bench/miragefig.sh [--figures DIR] [driver flags…]
#   bench/miragefig.sh --help        # every flag of the driver
#
# The chain api → frontend → backend (the demo's services: Go, Go and Java,
# each under `rootline run` in its own network namespace, no sidecars; the
# real server in the driver's process) is driven closed-loop by 1, 2, 4, 6,
# 8, 12, 16 and 24 concurrent clients, 20 s per step, once with a CPU quota
# on the backend's cgroup (Figure 5.4) and once with a tbf bandwidth limit on
# the backend's link (Figure 5.5).
# The amounts are derived from a calibration at one client so that the
# bottleneck appears at about 4 clients (--knee; --cpu-quota and --bandwidth
# set them instead). Per step and service: the clients' mean and p95
# latency, the mean local / net / remote waits of the stored spans (the
# server's query API, internal/mirage), and the per-hop decisions.
# `--configs none` runs the same ramp with nothing injected (the control).
#
# Builds and runs the driver (bench/miragefig), which prints its progress
# and the table and writes results.json and table.md to its --out
# directory; then draws mirage-cpu.png and mirage-net.png there (three
# panels each: backend, frontend, api) with matplotlib from the project's
# venv (scripts/deps.sh installs it), and copies them to --figures when
# given (the committed ones are bench/figures/mirage-*.png). About 8 min
# with the defaults. Needs root (pod mode, cgroups, tc) and `make build`.
set -euo pipefail
cd "$(dirname "$0")/.."

figures=
args=()
out=
while (($#)); do
	case $1 in
	--figures) figures=$2; shift 2 ;;
	-h | --help | -help)
		sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
		go run ./bench/miragefig --help 2>&1 || true
		exit 0 ;;
	--out) out=$2; args+=("$1" "$2"); shift 2 ;;
	--out=*) out=${1#--out=}; args+=("$1"); shift ;;
	*) args+=("$1"); shift ;;
	esac
done
if [[ -z $out ]]; then
	out=$(mktemp -d /tmp/rootline-miragefig.XXXXXX)
	args+=(--out "$out")
fi

venv=${ROOTLINE_VENV:-$HOME/.cache/rootline/venv}
if ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
	echo "miragefig.sh: no matplotlib in $venv (run scripts/deps.sh)" >&2
	exit 1
fi
if [[ ! -x bin/rootline || ! -x build/demo/svc-go ]]; then
	echo "miragefig.sh: run make build first (bin/rootline, build/demo/svc-go)" >&2
	exit 1
fi
bin=$(mktemp -d)/miragefig
trap 'rm -rf "$(dirname "$bin")"' EXIT
echo "miragefig.sh: building bench/miragefig"
go build -o "$bin" ./bench/miragefig
echo "miragefig.sh: $(date -u +%FT%TZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), kernel $(uname -r)"
"$bin" --rootline bin/rootline "${args[@]}"
"$venv/bin/python" bench/miragefig/plot.py "$out/results.json" "$out"
if [[ -n $figures ]]; then
	mkdir -p "$figures"
	for f in "$out"/mirage-*.png; do
		cp "$f" "$figures/"
		echo "miragefig.sh: copied $(basename "$f") to $figures"
	done
fi

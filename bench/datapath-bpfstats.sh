#!/usr/bin/env bash
# BPF run time per request of the in-kernel datapath, for several builds side
# by side: runoverhead --interleave runs a chain per build at once (spin 0),
# bpf_stats is on meanwhile, and each program's time is attributed to its
# build through the program descriptors its `rootline run` processes hold
# (/proc/<pid>/fdinfo). Builds with the same BPF object share one datapath
# (see internal/run/datapath), so compare builds whose objects differ.
#
#   bench/datapath-bpfstats.sh [-s SECONDS] [-h HOPS] [-r RATE] BINARY...
#
# Needs root, bpftool, python3, bin/rootline (make build) and the chain
# service (go build -C bench/chain -o /tmp/rl/chain .; CHAIN= elsewhere).
set -euo pipefail
secs=20 hops=3 rate=100
while getopts s:h:r: o; do
  case $o in s) secs=$OPTARG ;; h) hops=$OPTARG ;; r) rate=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-s SECONDS] [-h HOPS] [-r RATE] BINARY..." >&2; exit 2; }
cd "$(dirname "$0")/.."
chain=${CHAIN:-/tmp/rl/chain}
[ -x "$chain" ] || { echo "build the chain first: go build -C bench/chain -o $chain ." >&2; exit 2; }
tmp=$(mktemp -d)
trap 'sysctl -qw kernel.bpf_stats_enabled=0; rm -rf "$tmp"' EXIT
go build -o "$tmp/runoverhead" ./bench/runoverhead
modes=""
for b in "$@"; do modes="$modes,run@$(realpath "$b")"; done
sysctl -qw kernel.bpf_stats_enabled=1
"$tmp/runoverhead" --interleave --rootline bin/rootline --chain "$chain" --modes "${modes#,}" \
  --hops "$hops" --rates "$rate" --rounds 1 --duration "${secs}s" --spin-us 0 > "$tmp/out" 2>&1 &
sleep $((secs + 1)) # the chains' warm-up (2 s) and most of the measured load
bpftool -j prog show > "$tmp/progs.json"
for p in $(pgrep -f ' run --mode ebpf' || true); do
  exe=$(readlink "/proc/$p/exe" || true)
  for f in /proc/$p/fdinfo/*; do awk -v e="$exe" '/^prog_id:/{print $2, e}' "$f" 2>/dev/null || true; done
done | sort -u > "$tmp/owners"
wait
python3 - "$tmp" "$secs" "$rate" "$@" <<'PY'
import collections, json, os, sys
tmp, secs, rate, builds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), [os.path.realpath(b) for b in sys.argv[4:]]
owner = {}
for line in open(f"{tmp}/owners"):
    i, exe = line.split(maxsplit=1)
    owner[int(i)] = exe.strip()
ns = collections.defaultdict(collections.Counter)
cnt = collections.defaultdict(collections.Counter)
for p in json.load(open(f"{tmp}/progs.json")):
    b = owner.get(p["id"])
    if b and p.get("name", "").startswith("rd_"):
        ns[b][p["name"]] += p.get("run_time_ns", 0)
        cnt[b][p["name"]] += p.get("run_cnt", 0)
req = rate * secs
names = sorted({n for b in ns for n in ns[b]})
print("µs per request".ljust(18) + "".join(os.path.basename(b).rjust(16) for b in builds))
for n in names + ["all"]:
    row = [(sum(ns[b].values()) if n == "all" else ns[b][n]) / req / 1000 for b in builds]
    print(n.ljust(18) + "".join(f"{v:16.2f}" for v in row))
# Per run of each program (a tracepoint program runs for every event of the
# node, a run's or not: rd_seg for every TCP segment received).
print("ns per run".ljust(18) + "".join(os.path.basename(b).rjust(16) for b in builds))
for n in names:
    print(n.ljust(18) + "".join((f"{ns[b][n] / cnt[b][n]:10.0f} ({cnt[b][n] / secs:5.0f}/s)" if cnt[b][n] else "-".rjust(16)) for b in builds))
print("".join(l + "\n" for l in open(f"{tmp}/out").read().splitlines() if l.startswith("| ")), end="")
PY

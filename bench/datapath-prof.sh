#!/usr/bin/env bash
# Where the in-kernel datapath's BPF time goes, checkpoint by checkpoint
# (bench/RESULTS.md, `rootline run`): builds rootline with -DRD_PROF in a
# git worktree (bpf/run/prof.h: bpf_ktime_get_ns checkpoints in rd_recv,
# rd_msg and the functions that finish a head, summed per CPU in the map
# rd_prof; ~0.1-0.15 µs each), runs the 3-hop chain under
# it alone at spin 0, reads the map near the end and prints the mean time of
# each part per call.
#
#   bench/datapath-prof.sh [-r RATE] [-s SECONDS]
#
# Needs root, bpftool, python3, clang and libbpf-dev (scripts/deps.sh),
# bin/rootline and web/dist (make build) and the chain service
# (go build -C bench/chain -o /tmp/rl/chain .; CHAIN= elsewhere).
set -euo pipefail
rate=40 secs=25
while getopts r:s: o; do
  case $o in r) rate=$OPTARG ;; s) secs=$OPTARG ;; *) exit 2 ;; esac
done
cd "$(dirname "$0")/.."
chain=${CHAIN:-/tmp/rl/chain}
[ -x "$chain" ] || { echo "build the chain first: go build -C bench/chain -o $chain ." >&2; exit 2; }
[ -d web/dist ] || { echo "build the UI first: make build" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bench/datapath-variant.sh -DRD_PROF "$tmp/rootline-prof" >/dev/null
go build -o "$tmp/runoverhead" ./bench/runoverhead
echo "running the chain at $rate req/s for ${secs}s…" >&2
"$tmp/runoverhead" --interleave --rootline bin/rootline --chain "$chain" --modes "run@$tmp/rootline-prof" \
  --hops 3 --rates "$rate" --rounds 1 --duration "${secs}s" --spin-us 0 > "$tmp/out" 2>&1 &
sleep $((secs - 2)) # the chain's start and warm-up, and most of the load
bpftool -j map dump name rd_prof > "$tmp/prof.json"
wait
python3 - "$tmp/prof.json" "$rate" <<'PY'
import json, sys
maps = json.load(open(sys.argv[1]))
if isinstance(maps, dict):
    maps = [maps]
tot = [0] * 128  # sums at i, counts at 64 + i (bpf/run/prof.h)
for m in maps:
    for e in m.get("elements", []):
        k = e["formatted"]["key"]
        tot[k] += sum(v["value"] for v in e["formatted"]["values"])
parts = {
    0: "rd_recv: connection lookup, liveness", 1: "rd_recv: scratch, syscall registers", 2: "rd_recv: to the copy",
    3: "rd_recv: bpf_probe_read_user", 4: "rd_recv: head_begin", 5: "rd_recv: head scan (head_feed)",
    6: "rd_recv: request/response read (past its own)", 7: "rd_recv: the rest",
    10: "rd_msg: connection lookup, liveness", 11: "rd_msg: scratch, write sequence", 12: "rd_msg: to the pull",
    13: "rd_msg: bpf_msg_pull_data", 14: "rd_msg: copy", 15: "rd_msg: head_begin", 16: "rd_msg: head scan (head_feed)",
    17: "rd_msg: request/response written (past its own)", 18: "rd_msg: the rest", 19: "rd_msg: final linearising pull",
    20: "request read: header decoding", 21: "request read: state allocated (rd_reqs)", 22: "request read: state filled",
    23: "request read: bound to thread/goroutine", 24: "request read: event, head copied", 25: "request read: REQ event to the ring",
    26: "response read: header decoding",
    40: "request written: header decoding", 41: "request written: ids, parent lookup", 42: "request written: lines built",
    43: "request written: lines inserted", 44: "request written: CALL event built", 45: "request written: CALL event to the ring",
    46: "response written: header decoding", 47: "response written: request ended, looked up",
    48: "response written: timing lines built", 49: "response written: lines inserted",
}
print(f"rate {sys.argv[2]} req/s; mean ns per occurrence (n: occurrences)")
for prog, (a, b) in (("rd_recv", (0, 8)), ("rd_msg", (10, 20))):
    calls = tot[64 + a]
    total = sum(tot[a:b])
    print(f"{prog}: {calls} calls, {total / max(calls, 1):.0f} ns per call")
for i, name in parts.items():
    if tot[64 + i]:
        print(f"  {name:44s} n={tot[64 + i]:7d} {tot[i] / tot[64 + i]:7.0f} ns")
PY
grep "| run@" "$tmp/out" | cut -d'|' -f2-5

#!/usr/bin/env bash
# Builds a variant of rootline's in-kernel datapath, for side-by-side
# measurements (bench/RESULTS.md, `rootline run`): in a git worktree of
# HEAD, regenerates the datapath with RD_CFLAGS (a build switch of
# bpf/run_datapath.c: -DRD_FLOOR, the mechanism's floor; -DRD_PROF, the
# profiling checkpoints of bench/datapath-prof.sh) and builds the binary to
# OUT.
#
#   bench/datapath-variant.sh RD_CFLAGS OUT
#
# Run OUT beside bin/rootline with runoverhead's `run@OUT` mode. Needs clang
# and libbpf-dev (scripts/deps.sh) and web/dist (make build).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 RD_CFLAGS OUT" >&2; exit 2; }
cflags=$1 out=$(realpath -m "$2")
cd "$(dirname "$0")/.."
[ -d web/dist ] || { echo "build the UI first: make build" >&2; exit 2; }
tmp=$(mktemp -d)
wt="$tmp/wt"
trap 'git worktree remove --force "$wt" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
echo "building the datapath with $cflags…" >&2
git worktree add -q "$wt" HEAD
cp -r web/dist "$wt/web/"
(cd "$wt" &&
  RD_CFLAGS=$cflags go generate ./internal/run/datapath/ >/dev/null &&
  go build -o "$out" ./cmd/rootline)
echo "$out"

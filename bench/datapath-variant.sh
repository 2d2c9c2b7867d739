#!/usr/bin/env bash
# Builds a variant of rootline with a patch to the in-kernel datapath, for
# side-by-side measurements (bench/RESULTS.md, `rootline run`): in a git
# worktree of HEAD, applies PATCH, regenerates the datapath with RD_CFLAGS
# (the patch's switch, e.g. -DRD_FLOOR) and builds the binary to OUT.
#
#   bench/datapath-variant.sh PATCH RD_CFLAGS OUT
#
# Run OUT beside bin/rootline with runoverhead's `run@OUT` mode. Needs clang
# and libbpf-dev (scripts/deps.sh) and web/dist (make build). A patch
# follows bpf/run_datapath.c; when it no longer applies, redo it.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 PATCH RD_CFLAGS OUT" >&2; exit 2; }
patch=$(realpath "$1") cflags=$2 out=$(realpath -m "$3")
cd "$(dirname "$0")/.."
[ -d web/dist ] || { echo "build the UI first: make build" >&2; exit 2; }
tmp=$(mktemp -d)
wt="$tmp/wt"
trap 'git worktree remove --force "$wt" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
echo "building the datapath with $(basename "$patch") ($cflags)…" >&2
git worktree add -q "$wt" HEAD
cp -r web/dist "$wt/web/"
(cd "$wt" && git apply "$patch" &&
  RD_CFLAGS=$cflags go generate ./internal/rbinder/datapath/ >/dev/null &&
  go build -o "$out" ./cmd/rootline)
echo "$out"

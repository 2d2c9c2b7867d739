#!/usr/bin/env bash
# Runs one native Go fuzz target for a bounded time (make test-fuzz):
#
#   scripts/fuzz-one.sh PACKAGE TARGET FUZZTIME
#
# A real finding always writes its input to PACKAGE/testdata/fuzz/TARGET and
# fails. Go 1.26's fuzz coordinator can also fail a run whose -fuzztime
# expires while a worker is still busy (a loaded machine), with a bare
# "context deadline exceeded" and no input written (golang/go#75804, fixed
# in Go 1.27). The race needs a time limit: the coordinator only sets a
# deadline for -fuzztime DURATION. So such a run is tried once more with a
# count limit instead — as many inputs as the first try got through, about
# the same work — which has no deadline to race; it fails only on a finding.
set -uo pipefail
[ $# -eq 3 ] || { echo "usage: $0 PACKAGE TARGET FUZZTIME" >&2; exit 2; }
pkg=$1 name=$2 time=$3
go=${GO:-go}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
limit=$time
for try in 1 2; do
  "$go" test -run '^$' -fuzz "^$name\$" -fuzztime "$limit" "$pkg" 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] && exit 0
  if grep -q 'context deadline exceeded' "$out" && ! grep -q 'Failing input written' "$out" &&
    ! grep -qE 'panic:|_test\.go:[0-9]+:' "$out"; then
    execs=$(grep -oE 'execs: [0-9]+' "$out" | tail -1 | grep -oE '[0-9]+')
    [ "${execs:-0}" -ge 10000 ] || execs=10000
    limit="${execs}x"
    echo "fuzz $name: the fuzzing engine's deadline race (no failing input); trying once more for $limit inputs (no deadline)" >&2
    continue
  fi
  exit "$rc"
done
exit 1

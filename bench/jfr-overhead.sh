#!/usr/bin/env bash
# Overhead of a continuous JFR recording on a CPU-bound JVM (issue 4 benchmark):
# JSpin's throughput with no recording, with JFR's "default" settings and with its
# "profile" settings (what `rootline agent` starts), interleaved in one run.
#
#   bench/jfr-overhead.sh [--rounds 3] [--duration 15]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh
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
interleave "$rounds" none default profile

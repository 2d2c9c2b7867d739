#!/usr/bin/env bash
# Agent memory with many targets (issue 4 benchmark): starts a server, N target
# processes (2 CPU-bound, the rest idle), and `rootline agent --profilers cpu`
# targeting all of them; after --wait seconds of recording prints the agent's RSS,
# peak RSS and CPU seconds. Needs root (BPF).
#
#   bench/agent-rss.sh [--targets 20] [--wait 60]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh
targets=20 wait_s=60
while (($#)); do
	case $1 in
	--targets) targets=$2; shift 2 ;;
	--wait) wait_s=$2; shift 2 ;;
	*) echo "unknown option $1" >&2; exit 2 ;;
	esac
done
bin=${ROOTLINE_BIN:-./bin/rootline}
[[ -x $bin ]] || { echo "build first: make build" >&2; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
go build -o "$work/spin" ./bench/spin
"$bin" server --data-dir "$work/data" --otlp.grpc.addr 127.0.0.1:0 --otlp.http.addr 127.0.0.1:0 \
	--zipkin.addr 127.0.0.1:0 --query.addr 127.0.0.1:26687 --log.level warn &
pids+=($!)
args=()
for i in $(seq 1 "$targets"); do
	if ((i <= 2)); then "$work/spin" --duration $((wait_s + 30))s >/dev/null & else sleep $((wait_s + 30)) & fi
	pids+=($!)
	args+=(--target "pid=$!,service=svc-$i")
done
sleep 1
"$bin" agent --server http://127.0.0.1:26687 --listen 127.0.0.1:0 --discover=false --profilers cpu "${args[@]}" --log.level warn &
agent=$!
pids+=("$agent")
sleep "$wait_s"
kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
cpu=$(cpu_s "$agent")
targets_seen=$(curl -s http://127.0.0.1:26687/api/v1/agents | grep -o '"pid"' | wc -l)
echo "targets=$targets registered=$targets_seen wait_s=$wait_s agent_rss_mb=$(($(kb "$agent" VmRSS) / 1024)) agent_peak_rss_mb=$(($(kb "$agent" VmHWM) / 1024)) agent_cpu_s=$cpu"

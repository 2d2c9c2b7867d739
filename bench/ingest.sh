#!/usr/bin/env bash
# Ingest benchmark: drives a trace backend with OpenTelemetry's telemetrygen (OTLP gRPC) and
# prints one line of results.
#
#   bench/ingest.sh --target jaeger|rootline|jaeger-cassandra|rootline-cassandra|rootline-scaleout
#                   [--duration 30s] [--generators 2] [--workers 4]
#                   [--rate 5000] [--child-spans 4] [--batch-size 2048] [--traces N]
#                   [--port-offset N] [--verify-api] [--keep] [--engines DIR] [--detectors N] [--services]
#
# Needs bench/tools.sh run first (telemetrygen, jaeger), curl, ss (iproute2), awk; optional: GNU
# time (/usr/bin/time, for gen_cpu_s), jq (for --verify-api).
#
# Targets (everything listens on 127.0.0.1 only; a fresh temp data dir per run):
#   jaeger    Jaeger v2 all-in-one + Badger, from bench/tools.sh, config bench/jaeger-badger.yaml.
#             stored = otelcol_exporter_sent_spans of jaeger_storage_exporter (metrics port 8888).
#   rootline  ${ROOTLINE_BIN:-./bin/rootline} server ...; stored = rootline_pipeline_spans_stored_total
#             at http://127.0.0.1:16686/metrics (received/refused/failed from the other
#             rootline_pipeline_spans_* counters when the server exports them).
#   The scale-out targets need the engines of scripts/scaleout.sh (--engines DIR: the DIR given
#   to `scripts/scaleout.sh start`; each run gets its own keyspace, bucket and topics there):
#   jaeger-cassandra   Jaeger v2 with its Cassandra storage (bench/jaeger-cassandra.yaml).
#   rootline-cassandra the one-node server with storage.spans.type cassandra, artifacts in S3.
#   rootline-scaleout  one ingester (--role ingester) and --detectors N detectors (--role
#             detector) over Kafka, Cassandra and S3; stored = the detectors'
#             rootline_detector_spans_stored_total; cpu_s sums the ingester's and the detectors'.
#   For them engine_cpu_s is the CPU the engines (Kafka, Cassandra, S3) used during the run.
#
# Options:
#   --duration D      telemetrygen run time (Go duration, e.g. 30s; a bare number means seconds;
#                     default 30s)
#   --workers W       telemetrygen workers (goroutines) per generator process (default 4)
#   --rate R          nominal spans/s per worker (default 5000). telemetrygen's limiter (burst 1,
#                     one token per parent or child span) undershoots above ~1000/s per worker:
#                     4 workers at 5000 give ~6-7k spans/s per process here; "sent" in the
#                     result is the real offered load. 0 = unthrottled: not useful on a small
#                     machine (the generator burns CPU making spans its SDK drops and starves
#                     the target)
#   --generators G    telemetrygen processes run side by side (default 2): one process exports
#                     one batch at a time, so it alone cannot offer more than ~7k spans/s here
#   --child-spans K   child spans per trace (a trace has 1+K spans; default 4)
#   --batch-size B    telemetrygen SDK batch size, spans per OTLP export (default 2048, which is
#                     also the SDK's queue size; smaller batches cost the generator more CPU)
#   --traces N        send N traces per worker instead of running for --duration
#   --drain-timeout S max seconds to wait for the target to finish storing after the load ends
#   --settle S        the target is done when its stored count has not moved for S seconds
#   --verify-api      also count spans through the Jaeger HTTP API (/api/traces?service=...)
#                     (only meaningful for small runs: it fetches every trace)
#   --keep            keep the temp dir (data and logs)
#   --engines DIR     the engines' directory (scale-out targets)
#   --detectors N     detectors of rootline-scaleout (default 1); they take the query ports after
#                     the ingester's (16687, 16688, ... plus the offset)
#   --services        generator g sends as service telemetrygen-g instead of all as telemetrygen:
#                     the Kafka stage keys records by service, so one service is one partition
#                     and one detector; several let detectors share the load
#   --port-offset N   add N to every port (default 0: OTLP 4317/4318, query 16686, jaeger query
#                     gRPC 16685, health 13133, metrics 8888, rootline zipkin 9411); the machine
#                     is shared, so use an offset when another server already holds these ports
#
# Output: one line of key=value pairs on stdout (progress goes to stderr):
#   target sent received stored refused failed rpc_ms load_s ingest_s stored_per_s peak_rss_mb cpu_s
#   gen_cpu_s other_cpu_s generators workers rate child_spans batch_size
# sent = spans telemetrygen generated (traces * (1+K), from its log). Its SDK silently drops
#   spans when its export queue is full, so sent > received means the target was too slow to
#   take them (or the generator was starved of CPU).
# received = spans the target's receiver saw (accepted+refused+failed; "-" if the target does
#   not export such counters); stored = spans written to storage;
# rpc_ms = mean server time of one OTLP export call (jaeger only; rises steeply at saturation);
# ingest_s = from load start until the stored count stopped rising; stored_per_s = stored/ingest_s;
# peak_rss_mb = VmHWM of the target; cpu_s = utime+stime of the target (whole life, incl. startup);
# gen_cpu_s = telemetrygen's CPU (it shares the machine with the target); other_cpu_s = CPU
# seconds used by everything else on the machine during the run (noise from other work).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLS="${ROOTLINE_TOOLS:-$HOME/.cache/rootline/tools}"
BIN="$TOOLS/bin"
ROOTLINE_BIN="${ROOTLINE_BIN:-./bin/rootline}"

# Defaults: the load that saturates Jaeger+Badger on a 2-core machine (see bench notes in the
# header): 2 generators x 4 workers, ~12k spans/s actually offered.
target="" duration="30s" workers=4 rate=5000 child_spans=4 batch_size=2048 traces=""
drain_timeout=180 settle=5 verify_api=0 keep=0 port_offset=0 generators=2 engines="" detectors=1 services=0

usage() { sed -n '2,56p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }
while [[ $# -gt 0 ]]; do
	case "$1" in
	--target) target="$2"; shift 2 ;;
	--duration) duration="$2"; shift 2 ;;
	--workers) workers="$2"; shift 2 ;;
	--generators) generators="$2"; shift 2 ;;
	--rate) rate="$2"; shift 2 ;;
	--child-spans) child_spans="$2"; shift 2 ;;
	--batch-size) batch_size="$2"; shift 2 ;;
	--traces) traces="$2"; shift 2 ;;
	--drain-timeout) drain_timeout="$2"; shift 2 ;;
	--settle) settle="$2"; shift 2 ;;
	--verify-api) verify_api=1; shift ;;
	--keep) keep=1; shift ;;
	--port-offset) port_offset="$2"; shift 2 ;;
	--engines) engines="$2"; shift 2 ;;
	--detectors) detectors="$2"; shift 2 ;;
	--services) services=1; shift ;;
	-h | --help) usage 0 ;;
	*) echo "unknown option: $1" >&2; usage ;;
	esac
done
case "$target" in
jaeger | rootline) ;;
jaeger-cassandra | rootline-cassandra | rootline-scaleout)
	# Cassandra-backed targets store in batches that a loaded node may time out and the writer
	# retries: give them longer to show progress before calling the run settled.
	((settle >= 30)) || settle=30
	# Jaeger's exporter counts a batch (8192 spans, its batch processor's default) only when its
	# Cassandra writer has written every span of it, one after the other.
	[[ "$target" == jaeger-cassandra ]] && ((settle < 150)) && settle=150
	[[ -f "$engines/env" ]] || { echo "--target $target needs --engines DIR (scripts/scaleout.sh start DIR)" >&2; usage; }
	set -a
	# shellcheck disable=SC1091
	source "$engines/env"
	set +a
	;;
*) echo "--target jaeger|rootline|jaeger-cassandra|rootline-cassandra|rootline-scaleout is required" >&2; usage ;;
esac
[[ "$duration" =~ ^[0-9]+$ ]] && duration="${duration}s"
((child_spans >= 1)) || child_spans=1 # telemetrygen always makes at least one child span

log() { printf '[ingest %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now() { date +%s.%N; }

TELEMETRYGEN="$BIN/telemetrygen"
[[ -x "$TELEMETRYGEN" ]] || die "$TELEMETRYGEN missing: run bench/tools.sh"

work="$(mktemp -d "${TMPDIR:-/tmp}/rootline-ingest.XXXXXX")"
target_pid="" gen_pids=() extra_pids=()
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	# gen_pids are /usr/bin/time wrappers; stop their telemetrygen children first.
	for pid in "${gen_pids[@]}"; do pkill -TERM -P "$pid" 2>/dev/null || true; done
	for pid in "${gen_pids[@]}" $target_pid "${extra_pids[@]}"; do
		if kill -0 "$pid" 2>/dev/null; then
			kill -TERM "$pid" 2>/dev/null || true
			for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
			kill -0 "$pid" 2>/dev/null && { log "pid $pid ignored SIGTERM; killing"; kill -KILL "$pid" 2>/dev/null || true; }
			wait "$pid" 2>/dev/null || true
		fi
	done
	if ((keep)); then log "kept $work"; else rm -rf "$work"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- target-specific bits ----------------------------------------------------------------------
P_OTLP_GRPC=$((4317 + port_offset)) P_OTLP_HTTP=$((4318 + port_offset)) P_QUERY=$((16686 + port_offset))
P_QUERY_GRPC=$((16685 + port_offset)) P_HEALTH=$((13133 + port_offset)) P_METRICS=$((8888 + port_offset))
P_ZIPKIN=$((9411 + port_offset))
PORTS=("$P_OTLP_GRPC" "$P_OTLP_HTTP" "$P_QUERY")
case "$target" in
jaeger | jaeger-cassandra)
	[[ -x "$BIN/jaeger" ]] || die "$BIN/jaeger missing: run bench/tools.sh"
	PORTS+=("$P_QUERY_GRPC" "$P_HEALTH" "$P_METRICS")
	METRICS_URL="http://127.0.0.1:$P_METRICS/metrics"
	READY_URL="http://127.0.0.1:$P_HEALTH/status"
	;;
rootline | rootline-cassandra | rootline-scaleout)
	[[ -x "$ROOTLINE_BIN" ]] || die "rootline binary $ROOTLINE_BIN missing (set ROOTLINE_BIN)"
	PORTS+=("$P_ZIPKIN")
	METRICS_URL="http://127.0.0.1:$P_QUERY/metrics"
	READY_URL="$METRICS_URL"
	;;
esac

start_target() {
	local data="$work/data"
	mkdir -p "$data"
	case "$target" in
	jaeger)
		JAEGER_BADGER_DIR="$data" JAEGER_METRICS_PORT="$P_METRICS" JAEGER_HEALTH_PORT="$P_HEALTH" \
			JAEGER_OTLP_GRPC_PORT="$P_OTLP_GRPC" JAEGER_OTLP_HTTP_PORT="$P_OTLP_HTTP" \
			JAEGER_QUERY_HTTP_PORT="$P_QUERY" JAEGER_QUERY_GRPC_PORT="$P_QUERY_GRPC" \
			"$BIN/jaeger" --config "$HERE/jaeger-badger.yaml" >"$work/target.log" 2>&1 &
		;;
	jaeger-cassandra)
		JAEGER_CASSANDRA_SERVERS="$ROOTLINE_CASSANDRA_SERVERS" JAEGER_CASSANDRA_KEYSPACE="jaeger_bench_$run_id" \
			JAEGER_METRICS_PORT="$P_METRICS" JAEGER_HEALTH_PORT="$P_HEALTH" \
			JAEGER_OTLP_GRPC_PORT="$P_OTLP_GRPC" JAEGER_OTLP_HTTP_PORT="$P_OTLP_HTTP" \
			JAEGER_QUERY_HTTP_PORT="$P_QUERY" JAEGER_QUERY_GRPC_PORT="$P_QUERY_GRPC" \
			"$BIN/jaeger" --config "$HERE/jaeger-cassandra.yaml" >"$work/target.log" 2>&1 &
		;;
	rootline)
		"$ROOTLINE_BIN" server --data-dir "$data" \
			--otlp.grpc.addr "127.0.0.1:$P_OTLP_GRPC" --otlp.http.addr "127.0.0.1:$P_OTLP_HTTP" \
			--zipkin.addr "127.0.0.1:$P_ZIPKIN" --query.addr "127.0.0.1:$P_QUERY" >"$work/target.log" 2>&1 &
		;;
	rootline-cassandra | rootline-scaleout)
		scaleout_config >"$work/rootline.yaml"
		"$ROOTLINE_BIN" storage init --config "$work/rootline.yaml" --data-dir "$data" >&2 || die "storage init failed"
		local role=all d
		[[ "$target" == rootline-scaleout ]] && role=ingester
		"$ROOTLINE_BIN" server --config "$work/rootline.yaml" --role "$role" --data-dir "$data" \
			--otlp.grpc.addr "127.0.0.1:$P_OTLP_GRPC" --otlp.http.addr "127.0.0.1:$P_OTLP_HTTP" \
			--zipkin.addr "127.0.0.1:$P_ZIPKIN" --query.addr "127.0.0.1:$P_QUERY" >"$work/target.log" 2>&1 &
		target_pid=$!
		if [[ "$target" == rootline-scaleout ]]; then
			for d in $(seq 1 "$detectors"); do
				mkdir -p "$data/d$d"
				"$ROOTLINE_BIN" server --config "$work/rootline.yaml" --role detector --data-dir "$data/d$d" \
					--query.addr "127.0.0.1:$((P_QUERY + d))" >"$work/detector$d.log" 2>&1 &
				extra_pids+=($!)
			done
		fi
		return
		;;
	esac
	target_pid=$!
}

run_id="$(date +%s)_$$"
# scaleout_config prints the configuration of the Cassandra-backed targets: this run's own
# keyspace, bucket, topics and group on the engines of --engines.
scaleout_config() {
	cat <<EOF
storage:
  spans:
    type: cassandra
    cassandra: {servers: [$ROOTLINE_CASSANDRA_SERVERS], keyspace: rl_bench_$run_id}
  artifacts:
    type: s3
    s3: {endpoint: "$ROOTLINE_S3_ENDPOINT", region: $ROOTLINE_S3_REGION, bucket: rl-bench-${run_id//_/-}, bucket_lookup: path}
kafka:
  brokers: [$ROOTLINE_KAFKA_BROKERS]
  topic: rl-bench-$run_id-spans
  agents_topic: rl-bench-$run_id-agents
  group: rl-bench-$run_id
EOF
}

# Sum of every sample of a Prometheus metric family (all label sets), optionally filtered by a
# label substring. Prints 0 if absent.
metric_sum() { # text name [label-substring]
	awk -v n="$2" -v f="${3:-}" '
		$1 !~ /^#/ {
			name = $1; sub(/\{.*/, "", name)
			if (name == n && (f == "" || index($1, f) > 0)) s += $NF
		}
		END { printf "%.0f\n", s }' <<<"$1"
}
fetch_metrics() { curl -fsS --max-time 5 "$METRICS_URL" 2>/dev/null || true; }

# Jaeger's collector telemetry names carry a _total suffix in current releases; accept both.
jaeger_counter() { # text base-name [filter]
	local v
	v="$(metric_sum "$1" "${2}_total" "${3:-}")"
	[[ "$v" == 0 ]] && v="$(metric_sum "$1" "$2" "${3:-}")"
	echo "$v"
}
read_counts() { # sets STORED RECEIVED REFUSED FAILED from the target's metrics
	local m
	m="$(fetch_metrics)"
	case "$target" in
	jaeger | jaeger-cassandra)
		STORED="$(jaeger_counter "$m" otelcol_exporter_sent_spans 'exporter="jaeger_storage_exporter"')"
		FAILED="$(jaeger_counter "$m" otelcol_exporter_send_failed_spans 'exporter="jaeger_storage_exporter"')"
		local acc rfail
		acc="$(jaeger_counter "$m" otelcol_receiver_accepted_spans)"
		rfail="$(jaeger_counter "$m" otelcol_receiver_failed_spans)"
		REFUSED="$(jaeger_counter "$m" otelcol_receiver_refused_spans)"
		REFUSED=$((REFUSED + rfail)) # refused by the pipeline + failed in the receiver
		RECEIVED=$((acc + REFUSED))
		;;
	rootline-scaleout)
		local d n
		STORED=0 STORED_SPLIT=""
		for d in $(seq 1 "$detectors"); do
			n="$(metric_sum "$(curl -fsS --max-time 5 "http://127.0.0.1:$((P_QUERY + d))/metrics" 2>/dev/null || true)" \
				rootline_detector_spans_stored_total)"
			STORED=$((STORED + n)) STORED_SPLIT+="${STORED_SPLIT:+/}$n"
		done
		RECEIVED="$(metric_sum "$m" rootline_receiver_spans_received_total)"
		REFUSED="$(metric_sum "$m" rootline_receiver_spans_refused_total)"
		FAILED=0 # a span Kafka did not take is refused (503) to its client, not lost
		;;
	rootline | rootline-cassandra)
		STORED="$(metric_sum "$m" rootline_pipeline_spans_stored_total)"
		if grep -q '^rootline_pipeline_spans_received_total' <<<"$m"; then
			RECEIVED="$(metric_sum "$m" rootline_pipeline_spans_received_total)"
			REFUSED=$(($(metric_sum "$m" rootline_pipeline_spans_refused_queue_full_total) + \
				$(metric_sum "$m" rootline_pipeline_spans_refused_shutdown_total)))
			FAILED="$(metric_sum "$m" rootline_pipeline_spans_failed_total)"
		else
			FAILED="-" REFUSED="-" RECEIVED="-"
		fi
		;;
	esac
}

cpu_seconds() { # pid -> utime+stime in seconds
	local stat rest tck
	stat="$(cat "/proc/$1/stat" 2>/dev/null)" || { echo 0; return; }
	rest="${stat##*) }" # fields from 3 on (comm may contain spaces)
	tck="$(getconf CLK_TCK)"
	awk -v t="$tck" '{ printf "%.2f\n", ($12 + $13) / t }' <<<"$rest"
}
machine_busy_seconds() { # CPU time all processes used so far (user+nice+system+irq+softirq+steal)
	awk -v t="$(getconf CLK_TCK)" '$1 == "cpu" { printf "%.2f\n", ($2 + $3 + $4 + $7 + $8 + $9) / t; exit }' /proc/stat
}
vm_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
# The target's CPU and peak RSS: with rootline-scaleout, the ingester's and the detectors' summed.
targets_cpu() {
	local pid sum=0
	for pid in $target_pid "${extra_pids[@]}"; do sum="$(awk -v a="$sum" -v b="$(cpu_seconds "$pid")" 'BEGIN { printf "%.2f", a + b }')"; done
	echo "$sum"
}
targets_hwm_kb() {
	local pid sum=0
	for pid in $target_pid "${extra_pids[@]}"; do sum=$((sum + $(vm_kb "$pid" VmHWM))); done
	echo "$sum"
}
# engines_cpu: CPU seconds of the scale-out engines (Kafka, Cassandra, S3) so far; 0 without them.
engines_cpu() {
	local f sum=0
	[[ -n "$engines" ]] || { echo 0; return; }
	for f in "$engines"/*.pid; do
		[[ -f "$f" ]] && sum="$(awk -v a="$sum" -v b="$(cpu_seconds "$(cat "$f")")" 'BEGIN { printf "%.2f", a + b }')"
	done
	echo "$sum"
}

# --- run -----------------------------------------------------------------------------------------
for p in "${PORTS[@]}"; do
	if ss -Htln "sport = :$p" | grep -q .; then die "port $p is already in use"; fi
done

log "starting $target (data dir $work/data)"
start_target
for i in $(seq 1 150); do
	kill -0 "$target_pid" 2>/dev/null || { tail -20 "$work/target.log" >&2; die "$target exited during startup"; }
	curl -fsS --max-time 2 -o /dev/null "$READY_URL" 2>/dev/null &&
		curl -fsS --max-time 2 -o /dev/null "$METRICS_URL" 2>/dev/null && break
	((i == 150)) && die "$target not ready after 30s"
	sleep 0.2
done
for d in $(seq 1 "${#extra_pids[@]}"); do # rootline-scaleout's detectors
	for i in $(seq 1 150); do
		kill -0 "${extra_pids[d - 1]}" 2>/dev/null || { tail -20 "$work/detector$d.log" >&2; die "detector $d exited during startup"; }
		curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$((P_QUERY + d))/metrics" 2>/dev/null && break
		((i == 150)) && die "detector $d not ready after 30s"
		sleep 0.2
	done
done
# Safety: the target must listen on loopback only.
listeners="$(ss -Htulnp | grep "pid=$target_pid," | awk '{print $1 ":" $5}' | sort -u | tr '\n' ' ')"
log "$target ready (pid $target_pid), listening on: $listeners"
for a in $listeners; do
	case "${a#*:}" in 127.* | \[::1\]:* | ::1:*) ;; *) die "$target listens beyond loopback: $a" ;; esac
done

gen_args=(traces --otlp-insecure --otlp-endpoint "127.0.0.1:$P_OTLP_GRPC" --workers "$workers" --rate "$rate"
	--child-spans "$child_spans" --batch-size "$batch_size" --allow-export-failures)
if [[ -n "$traces" ]]; then gen_args+=(--traces "$traces"); else gen_args+=(--duration "$duration"); fi
log "$generators x telemetrygen ${gen_args[*]}$( ((services)) && echo " --service telemetrygen-G")"
t_start="$(now)"
busy0="$(machine_busy_seconds)" cpu0="$(targets_cpu)" ecpu0="$(engines_cpu)"
for g in $(seq 1 "$generators"); do
	svc_args=()
	((services)) && svc_args=(--service "telemetrygen-$g")
	if [[ -x /usr/bin/time ]]; then # GNU time (Debian package "time") records the generator's CPU
		/usr/bin/time -f '%U %S' -o "$work/gen$g.time" "$TELEMETRYGEN" "${gen_args[@]}" "${svc_args[@]}" >"$work/gen$g.log" 2>&1 &
	else
		"$TELEMETRYGEN" "${gen_args[@]}" "${svc_args[@]}" >"$work/gen$g.log" 2>&1 &
	fi
	gen_pids+=($!)
done

# While the load runs and the target drains, poll the stored counter; done when it stops rising
# for $settle seconds after the generator exited (or it caught up with received spans).
last_stored=-1 t_last="$t_start" t_gen_end="" gen_rc=0 next_report=$SECONDS
while :; do
	sleep 1 # a scrape of Jaeger's detailed metrics costs it ~20 ms of CPU: do not poll faster
	kill -0 "$target_pid" 2>/dev/null || { tail -20 "$work/target.log" >&2; die "$target died during the run"; }
	read_counts
	t="$(now)"
	if ((STORED != last_stored)); then last_stored=$STORED; t_last="$t"; fi
	if [[ -z "$t_gen_end" ]]; then
		running=0
		for pid in "${gen_pids[@]}"; do kill -0 "$pid" 2>/dev/null && running=1; done
		if ((!running)); then
			for pid in "${gen_pids[@]}"; do wait "$pid" || gen_rc=$?; done
			gen_pids=() t_gen_end="$t"
			log "telemetrygen finished (rc=$gen_rc); waiting for $target to drain"
		fi
	fi
	if ((SECONDS >= next_report)); then
		log "stored=$STORED received=$RECEIVED rss=$(($(vm_kb "$target_pid" VmRSS) / 1024))MB"
		next_report=$((SECONDS + 5))
	fi
	if [[ -n "$t_gen_end" ]]; then
		if [[ "$RECEIVED" != "-" ]] && ((STORED + FAILED + REFUSED >= RECEIVED)); then break; fi
		# Settled: stored has not risen for $settle seconds since the later of its last rise and
		# the load's end (a detector may store nothing for a while behind Kafka, then a batch).
		awk -v a="$t" -v b="$t_last" -v e="$t_gen_end" -v s="$settle" 'BEGIN { if (e > b) b = e; exit !(a - b >= s) }' && break
		awk -v a="$t" -v b="$t_gen_end" -v s="$drain_timeout" 'BEGIN { exit !(a - b >= s) }' && {
			log "drain timeout (${drain_timeout}s) reached"
			break
		}
	fi
done

peak_kb="$(targets_hwm_kb)"
cpu="$(targets_cpu)"
engine_cpu="$(awk -v a="$(engines_cpu)" -v b="$ecpu0" 'BEGIN { printf "%.2f", a - b }')"
busy1="$(machine_busy_seconds)"
rpc_ms="-" # mean server-side latency of an OTLP export call (jaeger's gRPC server telemetry)
if [[ "$target" == jaeger ]]; then
	m="$(fetch_metrics)"
	rpc_ms="$(awk -v s="$(metric_sum "$m" rpc_server_duration_milliseconds_sum)" \
		-v c="$(metric_sum "$m" rpc_server_duration_milliseconds_count)" 'BEGIN { printf "%.1f", (c > 0 ? s / c : 0) }')"
fi
gen_traces="$(cat "$work"/gen*.log | grep -o '"traces": *[0-9]*' | awk -F: '{ s += $2 } END { print s + 0 }')"
sent=$((gen_traces * (1 + child_spans)))
gen_cpu="$(cat "$work"/gen*.time 2>/dev/null | awk '{ s += $1 + $2 } END { printf "%.2f", s }')"
cat "$work"/gen*.log | grep -E $'\t(WARN|ERROR|FATAL)\t' | head -5 | sed 's/^/[telemetrygen] /' >&2 || true

api_spans="-"
if ((verify_api)); then
	# Jaeger-compatible HTTP API (both targets serve /api/traces on the query port).
	api_spans="$(curl -fsS --max-time 60 "http://127.0.0.1:$P_QUERY/api/traces?service=telemetrygen&limit=$((gen_traces + 10))&lookback=1h" |
		jq '[.data[].spans | length] | add // 0' 2>/dev/null || echo "?")"
fi

load_s="$(awk -v a="${t_gen_end:-$t_last}" -v b="$t_start" 'BEGIN { printf "%.1f", a - b }')"
ingest_s="$(awk -v a="$t_last" -v b="$t_start" 'BEGIN { printf "%.1f", a - b }')"
# CPU used on the machine during the run by anything other than the target and telemetrygen:
# other engineers' builds share this machine, so a large value flags a disturbed measurement.
other_cpu="$(awk -v b0="$busy0" -v b1="$busy1" -v c0="$cpu0" -v c1="$cpu" -v g="$gen_cpu" \
	-v e="$engine_cpu" 'BEGIN { o = (b1 - b0) - (c1 - c0) - g - e; printf "%.1f", (o < 0 ? 0 : o) }')"
rate_stored="$(awk -v s="$STORED" -v d="$ingest_s" 'BEGIN { printf "%.0f", (d > 0 ? s / d : 0) }')"
line="target=$target sent=$sent received=$RECEIVED stored=$STORED refused=$REFUSED failed=$FAILED"
line+=" rpc_ms=$rpc_ms load_s=$load_s ingest_s=$ingest_s stored_per_s=$rate_stored peak_rss_mb=$((peak_kb / 1024))"
line+=" cpu_s=$cpu engine_cpu_s=$engine_cpu gen_cpu_s=$gen_cpu other_cpu_s=$other_cpu generators=$generators workers=$workers rate=$rate child_spans=$child_spans batch_size=$batch_size"
if [[ "$target" == rootline-scaleout ]]; then
	cpu_split="$(for pid in $target_pid "${extra_pids[@]}"; do cpu_seconds "$pid"; done | paste -sd/)"
	line+=" detectors=$detectors stored_by_detector=$STORED_SPLIT cpu_s_ingester_detectors=$cpu_split"
fi
((verify_api)) && line+=" api_spans=$api_spans"
echo "$line"

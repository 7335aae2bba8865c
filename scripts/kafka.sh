#!/usr/bin/env bash
# A throwaway Apache Kafka broker on loopback, for tests: Kafka's own jars
# from Maven Central (fetched with Maven into a cache outside the clone), one
# combined broker+controller in KRaft mode, with the settings transactions
# need on a single node (transaction state log replication 1, min ISR 1).
#
#   bash scripts/kafka.sh up     # fetch if missing, format a log folder, start, wait until it answers
#   bash scripts/kafka.sh env    # print the brokers as an export
#   bash scripts/kafka.sh down   # stop it and delete its log folder
#   bash scripts/kafka.sh stop   # stop it, keeping its log folder (a broker restart, for tests)
#   bash scripts/kafka.sh start  # start it again on that folder, wait until it answers
#   bash scripts/kafka.sh topic NAME PARTITIONS   # create a topic (Kafka's own TopicCommand)
#
# TIDEWATER_KAFKA_PORT, TIDEWATER_KAFKA_CONTROLLER_PORT and TIDEWATER_KAFKA_DIR
# place a second broker beside the first (the restart test runs its own).
#
# Measured on a 2-core test machine: the cold fetch (92 jars, 54 MB, empty
# Maven repository) took 6 s, formatting the log folder 0.9 s, and the broker
# answered ApiVersions 2.6 s after it was started; `up` from nothing took 12 s.
# A transactional producer (Kafka's ProducerPerformance with
# --transactional-id) committed 1000 records on it. Needs Java 17 and Maven.
set -euo pipefail

version="${TIDEWATER_KAFKA_VERSION:-4.4.0}"
port="${TIDEWATER_KAFKA_PORT:-54392}"
controller_port="${TIDEWATER_KAFKA_CONTROLLER_PORT:-54393}"
dir="${TIDEWATER_KAFKA_DIR:-/tmp/tidewater-kafka}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/tidewater/kafka-$version"

# Whether the broker answers an ApiVersions request (a listening socket is
# not enough: the broker accepts connections before it serves them).
ready() {
  python3 - "$port" <<'PY'
import socket, struct, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1)
    body = struct.pack(">hhih", 18, 0, 1, 2) + b"tw"  # ApiVersions v0, client "tw"
    s.sendall(struct.pack(">i", len(body)) + body)
    size = struct.unpack(">i", s.recv(4))[0]
    _, error = struct.unpack(">ih", s.recv(size)[:6])
    sys.exit(0 if error == 0 else 1)
except Exception:
    sys.exit(1)
PY
}

fetch() {
  if [[ -f $cache/complete ]]; then return; fi
  echo "fetching Apache Kafka $version with Maven into $cache" >&2
  mkdir -p "$cache"
  cat > "$cache/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.tidewater</groupId>
  <artifactId>test-kafka</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>2.0.20</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId><version>2.0.20</version></dependency>
  </dependencies>
</project>
POM
  (cd "$cache" && mvn -q -B dependency:copy-dependencies -DoutputDirectory="$cache/libs" >&2)
  touch "$cache/complete"
}

up() {
  if ready; then
    echo "already running" >&2
    return 0
  fi
  fetch
  down
  mkdir -p "$dir/data"
  cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller_port
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
min.insync.replicas=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
PROPS
  local cluster
  # A cluster id is a URL-safe base64 UUID. One in 64 begins with '-', which
  # the storage tool's argument parser takes for an option ("argument
  # --cluster-id/-t: expected one argument"), so draw until it does not, as
  # Kafka's own Uuid.randomUuid does.
  cluster=$(python3 -c "
import base64, uuid
while True:
    id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip('=')
    if not id.startswith('-'):
        print(id)
        break
")
  java -cp "$cache/libs/*" kafka.tools.StorageTool format -t "$cluster" \
    -c "$dir/server.properties" >"$dir/format.log" 2>&1 \
    || { echo "formatting the Kafka log folder failed:" >&2; cat "$dir/format.log" >&2; return 1; }
  start
}

start() {
  nohup java -Xmx512m -cp "$cache/libs/*" kafka.Kafka "$dir/server.properties" \
    >>"$dir/broker.log" 2>&1 &
  echo $! >"$dir/broker.pid"
  for _ in $(seq 1 300); do
    ready && break
    sleep 0.1
  done
  ready || { echo "the Kafka broker did not start; log:" >&2; tail -n 40 "$dir/broker.log" >&2; return 1; }
  echo "Kafka $version on 127.0.0.1:$port" >&2
}

env_() {
  echo "export TIDEWATER_KAFKA_BROKERS=127.0.0.1:$port"
}

stop() {
  if [[ -f $dir/broker.pid ]]; then
    local pid
    pid=$(cat "$dir/broker.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/broker.pid"
  fi
}

down() {
  stop
  rm -rf "$dir"
}

topic() {
  local log
  log=$(mktemp)
  java -cp "$cache/libs/*" org.apache.kafka.tools.TopicCommand \
    --bootstrap-server "127.0.0.1:$port" --create --topic "$1" --partitions "$2" \
    --replication-factor 1 >"$log" 2>&1 \
    || { echo "creating topic $1 failed:" >&2; tail -n 20 "$log" >&2; rm -f "$log"; return 1; }
  rm -f "$log"
}

case "${1:-}" in
  up) up ;;
  env) env_ ;;
  down) down ;;
  stop) stop ;;
  start) start ;;
  topic) topic "$2" "$3" ;;
  *) echo "usage: $0 up|env|down|stop|start|topic NAME PARTITIONS" >&2; exit 2 ;;
esac

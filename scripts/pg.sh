#!/usr/bin/env bash
# A throwaway PostgreSQL primary and streaming replica on loopback, for tests.
#
#   bash scripts/pg.sh up     # install if missing, start both, wait until ready
#   bash scripts/pg.sh env    # print the connection URLs as shell exports
#   bash scripts/pg.sh down   # stop both and delete their data
#
# Data lives under $TIDEWATER_PG_DIR (default /tmp/tidewater-pg): the server
# runs as the `postgres` user, which cannot read most other places.
#
# TLS is on, with a throwaway CA made at start-up (Debian's openssl) and a
# server certificate for the name `localhost` only, so that a test can prove
# verify-full against the right CA, and a failure against a wrong CA or host
# name. Two databases only take TLS: `tw_tls_only` (any TLS connection) and
# `tw_tls_cert` (a client certificate signed by the CA, for user postgres).
set -euo pipefail

dir="${TIDEWATER_PG_DIR:-/tmp/tidewater-pg}"
primary_port="${TIDEWATER_PG_PORT:-54329}"
replica_port=$((primary_port + 1))

bin_dir() {
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  [[ -n $found && -x $found/initdb ]] && { echo "$found"; return; }
  echo "installing PostgreSQL from Debian's packages" >&2
  mkdir -p /etc/postgresql-common
  # Do not create Debian's own cluster: we make our own.
  echo "create_main_cluster = false" >> /etc/postgresql-common/createcluster.conf
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
  found=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  echo "$found"
}

as_pg() { runuser -u postgres -- "$@"; }

wait_ready() {
  local port=$1
  for _ in $(seq 1 120); do
    if "$BIN/pg_isready" -q -h 127.0.0.1 -p "$port"; then return 0; fi
    sleep 0.25
  done
  echo "PostgreSQL on port $port did not become ready; log:" >&2
  tail -n 30 "$dir"/*.log >&2 || true
  return 1
}

# One database the primary refuses to everyone (pg_hba `reject`), so that the
# tests can check what a refused connection says.
refuse_line="host tw_hba_refused all 127.0.0.1/32 reject"
ensure_refusal() {
  if ! grep -qxF "$refuse_line" "$dir/primary/pg_hba.conf"; then
    sed -i "1i $refuse_line" "$dir/primary/pg_hba.conf"
    as_pg "$BIN/pg_ctl" -D "$dir/primary" reload >/dev/null
  fi
}

# The CA, the server's certificate (localhost), a client certificate (CN
# postgres) and a second CA that signed nothing here, under $dir/tls.
make_certificates() {
  if ! command -v openssl >/dev/null; then
    echo "installing openssl from Debian's packages" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >&2
  fi
  local tls="$dir/tls"
  mkdir -p "$tls"
  (
    cd "$tls"
    for ca in ca other-ca; do
      openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=tidewater test $ca" \
        -keyout "$ca.key" -out "$ca.crt" 2>/dev/null
    done
    sign() { # name, subject, extensions
      openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
      printf '%s\n' "$3" > "$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
        -extfile "$1.ext" -out "$1.crt" 2>/dev/null
    }
    sign server "/CN=localhost" "subjectAltName=DNS:localhost"
    sign client "/CN=postgres" "extendedKeyUsage=clientAuth"
  )
  chown -R postgres: "$tls"
  chmod 600 "$tls"/*.key
}

# TLS-only databases: the first lines of pg_hba.conf win.
tls_hba() {
  cat <<HBA
hostssl tw_tls_only all 127.0.0.1/32 trust
hostnossl tw_tls_only all 127.0.0.1/32 reject
hostssl tw_tls_cert all 127.0.0.1/32 cert
host tw_tls_cert all 127.0.0.1/32 reject
HBA
}

up() {
  BIN=$(bin_dir)
  if "$BIN/pg_isready" -q -h 127.0.0.1 -p "$primary_port" && "$BIN/pg_isready" -q -h 127.0.0.1 -p "$replica_port"; then
    ensure_refusal
    echo "already running" >&2
    return 0
  fi
  down_quiet
  mkdir -p "$dir"
  chown postgres: "$dir"
  make_certificates
  as_pg "$BIN/initdb" --no-sync -D "$dir/primary" -U postgres --auth=trust >/dev/null
  cat >> "$dir/primary/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $primary_port
unix_socket_directories = '$dir'
wal_level = replica
max_wal_senders = 10
max_replication_slots = 10
max_prepared_transactions = 64
max_connections = 200
wal_receiver_status_interval = 1s
max_standby_streaming_delay = -1
hot_standby_feedback = on
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 256MB
ssl = on
ssl_cert_file = '$dir/tls/server.crt'
ssl_key_file = '$dir/tls/server.key'
ssl_ca_file = '$dir/tls/ca.crt'
CONF
  echo "host replication all 127.0.0.1/32 trust" >> "$dir/primary/pg_hba.conf"
  { echo "$refuse_line"; tls_hba; cat "$dir/primary/pg_hba.conf"; } > "$dir/hba.new"
  mv "$dir/hba.new" "$dir/primary/pg_hba.conf"
  chown postgres: "$dir/primary/pg_hba.conf"
  as_pg "$BIN/pg_ctl" -D "$dir/primary" -l "$dir/primary.log" -w start >/dev/null
  wait_ready "$primary_port"
  for db in tw_tls_only tw_tls_cert; do
    as_pg "$BIN/psql" -q -h "$dir" -p "$primary_port" -U postgres -c "CREATE DATABASE $db" >/dev/null
  done
  as_pg "$BIN/pg_basebackup" -h 127.0.0.1 -p "$primary_port" -U postgres -D "$dir/replica" \
    -R -X stream -C -S tidewater_replica --checkpoint=fast >/dev/null
  sed -i "s/^port = .*/port = $replica_port/" "$dir/replica/postgresql.conf"
  as_pg "$BIN/pg_ctl" -D "$dir/replica" -l "$dir/replica.log" -w start >/dev/null
  wait_ready "$replica_port"
  echo "primary on 127.0.0.1:$primary_port, replica on 127.0.0.1:$replica_port" >&2
}

down_quiet() {
  local bin
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  for node in replica primary; do
    if [[ -n $bin && -f $dir/$node/postmaster.pid ]]; then
      as_pg "$bin/pg_ctl" -D "$dir/$node" -m immediate -w stop >/dev/null 2>&1 || true
    fi
  done
  rm -rf "$dir"
}

env_urls() {
  echo "export TIDEWATER_PG_PRIMARY=postgres://postgres@127.0.0.1:$primary_port/postgres"
  echo "export TIDEWATER_PG_REPLICA=postgres://postgres@127.0.0.1:$replica_port/postgres"
  echo "export TIDEWATER_PG_TLS_DIR=$dir/tls"
}

case "${1:-}" in
  up) up ;;
  down) down_quiet ;;
  env) env_urls ;;
  *) echo "usage: $0 up|down|env" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# The chaos run's own services: a RabbitMQ node and a PostgreSQL cluster that
# nothing else on the machine uses, so that restarting them (which is the
# point of the run) disturbs no other work. They are started on demand and
# stopped at the end of every run.
#
#   chaos/services.sh rabbit start|stop|restart 3.10|4.0
#   chaos/services.sh pg     start|stop|restart PORT
#
# RabbitMQ 3.10 is the machine's own install, run as a second node (the
# recipe of DESIGN.md, "A RabbitMQ cluster on one machine"): node
# warren-chaos@localhost, AMQP 5690, management 15690, distribution 25690.
# RabbitMQ 4.0 is a second node inside the project's 4.0 chroot
# (scripts/rabbitmq4.sh builds it): warren-chaos4@localhost, AMQP 5691,
# management 15691, distribution 25691. Neither is ever joined to a cluster.
#
# PostgreSQL is the machine's PostgreSQL 15 binaries with a cluster of its
# own (initdb into a directory of its own), trust auth on loopback only.
#
# Data lives under WARREN_CHAOS_DIR (default /var/lib/warren/chaos); a start
# wipes the previous run's data. Needs root (the nodes run as the rabbitmq
# and postgres users).
set -euo pipefail

BASE=${WARREN_CHAOS_DIR:-/var/lib/warren/chaos}
BASE=${BASE%/}
RABBIT4_ROOT=${WARREN_RABBIT4_DIR:-/var/lib/warren/rabbit4}
RABBIT4_ROOT=${RABBIT4_ROOT%/}
PG_BIN=${WARREN_CHAOS_PG_BIN:-/usr/lib/postgresql/15/bin}

say() { printf 'chaos services: %s\n' "$*"; }
die() { printf 'chaos services: error: %s\n' "$*" >&2; exit 1; }

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

[[ $EUID -eq 0 ]] || die "the chaos run starts its own RabbitMQ node and PostgreSQL cluster as the rabbitmq and postgres users, which needs root; run it as root (CI does)"

# --- RabbitMQ ----------------------------------------------------------------

# Sets the node's name, ports and where its files live, for a broker version.
# DIR is the node's directory as the node sees it; HOST_DIR the same directory
# seen from the host (they differ inside the chroot).
rabbit_vars() {
  case $1 in
    3.10)
      NODE=warren-chaos@localhost AMQP_PORT=5690 MGMT_PORT=15690 DIST_PORT=25690
      ROOT='' DIR=$BASE/rabbit-3.10 ;;
    4.0)
      NODE=warren-chaos4@localhost AMQP_PORT=5691 MGMT_PORT=15691 DIST_PORT=25691
      ROOT=$RABBIT4_ROOT DIR=/var/lib/warren-chaos/rabbit-4.0
      [[ -d $ROOT ]] || die "the RabbitMQ 4.0 chroot $ROOT is not built; run: bash scripts/rabbitmq4.sh start" ;;
    *) die "unknown broker '$1' (use 3.10 or 4.0)" ;;
  esac
  HOST_DIR=$ROOT$DIR
}

# Runs a RabbitMQ program (server, rabbitmqctl) as the rabbitmq user, with a
# clean environment naming only this node's files, in the chroot for 4.0.
# The Debian wrappers in /usr/sbin are bypassed: they write the startup log
# of the machine's own node.
as_rabbit() {
  local prog=$1
  shift
  local envs=(
    PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/var/lib/rabbitmq LANG=C.UTF-8
    RABBITMQ_CONF_ENV_FILE="$DIR/rabbitmq-env.conf"
    RABBITMQ_NODENAME="$NODE" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
    RABBITMQ_NODE_PORT="$AMQP_PORT" RABBITMQ_DIST_PORT="$DIST_PORT"
    RABBITMQ_CONFIG_FILE="$DIR/rabbitmq" RABBITMQ_ENABLED_PLUGINS_FILE="$DIR/enabled_plugins"
    RABBITMQ_MNESIA_BASE="$DIR/mnesia" RABBITMQ_LOG_BASE="$DIR/log" RABBITMQ_PID_FILE="$DIR/pid"
    ERL_EPMD_ADDRESS=127.0.0.1
  )
  if [[ -n $ROOT ]]; then
    chroot "$ROOT" /usr/sbin/runuser -u rabbitmq -- env -i "${envs[@]}" "/usr/lib/rabbitmq/bin/$prog" "$@"
  else
    (cd "$HOST_DIR" && runuser -u rabbitmq -- env -i "${envs[@]}" "/usr/lib/rabbitmq/bin/$prog" "$@")
  fi
}

mgmt_ok() { curl -fsS -m 3 -u guest:guest "http://127.0.0.1:$MGMT_PORT/api/overview" >/dev/null 2>&1; }

node_registered() { epmd -names 2>/dev/null | grep -q "^name ${NODE%@*} "; }

# The 4.0 node needs /proc in the chroot. scripts/rabbitmq4.sh mounts it for
# the project's own node; mount it only when it is missing, under the same
# lock that script takes.
mount_chroot_proc() {
  [[ -n $ROOT ]] || return 0
  (
    flock -w 600 9 || die "could not take $ROOT.lock"
    mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
  ) 9>"$ROOT.lock"
}

rabbit_wait_ready() {
  local deadline=$(( $(date +%s) + 180 ))
  until amqp_ready "$AMQP_PORT" && mgmt_ok; do
    if (( $(date +%s) > deadline )); then
      say "node $NODE not ready after 180s; last lines of its logs:" >&2
      tail -n 30 "$HOST_DIR"/log/*.log "$HOST_DIR/start.log" >&2 2>/dev/null || true
      return 1
    fi
    sleep 0.5
  done
}

rabbit_boot() {
  mount_chroot_proc
  as_rabbit rabbitmq-server -detached </dev/null >"$HOST_DIR/start.log" 2>&1 || {
    cat "$HOST_DIR/start.log" >&2
    die "rabbitmq-server -detached failed for $NODE"
  }
  rabbit_wait_ready
}

rabbit_start() {
  if node_registered; then
    say "node $NODE is running from an earlier run; stopping it first"
    rabbit_stop
  fi
  rm -rf --one-file-system "$HOST_DIR"
  mkdir -p "$HOST_DIR/log" "$HOST_DIR/mnesia"
  # Statistics every 500 ms (default 5 s), so the run sees queues drain promptly.
  cat >"$HOST_DIR/rabbitmq.conf" <<EOF
# Written by warren's chaos/services.sh: the chaos run's own node.
listeners.tcp.default = 127.0.0.1:$AMQP_PORT
management.tcp.ip = 127.0.0.1
management.tcp.port = $MGMT_PORT
distribution.listener.interface = 127.0.0.1
collect_statistics_interval = 500
loopback_users = none
EOF
  echo '[rabbitmq_management].' >"$HOST_DIR/enabled_plugins"
  : >"$HOST_DIR/rabbitmq-env.conf"
  chown -R rabbitmq:rabbitmq "$HOST_DIR"
  [[ -z $ROOT ]] || chown -R rabbitmq:rabbitmq "$(dirname "$HOST_DIR")"
  local started
  started=$(date +%s)
  rabbit_boot
  say "RabbitMQ $(curl -fsS -u guest:guest "http://127.0.0.1:$MGMT_PORT/api/overview" | sed -nE 's/.*"rabbitmq_version":"([^"]*)".*/\1/p') node $NODE ready in $(( $(date +%s) - started ))s: amqp://127.0.0.1:$AMQP_PORT, management http://127.0.0.1:$MGMT_PORT"
}

rabbit_stop() {
  if node_registered; then
    # shutdown (unlike stop) returns once the node's OS process has exited.
    as_rabbit rabbitmqctl -q -n "$NODE" shutdown >/dev/null 2>&1 || true
  fi
  local deadline=$(( $(date +%s) + 60 ))
  while node_registered || amqp_ready "$AMQP_PORT"; do
    if (( $(date +%s) > deadline )); then
      local pid
      pid=$(cat "$HOST_DIR/pid" 2>/dev/null || true)
      say "node $NODE did not stop within 60s; killing its process ${pid:-(no pid file)}" >&2
      [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.5
  done
}

rabbit_restart() {
  local started
  started=$(date +%s)
  rabbit_stop
  rabbit_boot
  say "node $NODE restarted in $(( $(date +%s) - started ))s"
}

# --- PostgreSQL --------------------------------------------------------------

pg_vars() {
  PORT=$1
  [[ $PORT =~ ^[0-9]+$ ]] || die "PostgreSQL port '$PORT' is not a number"
  PGDIR=$BASE/pg-$PORT
}

as_pg() { runuser -u postgres -- "$@"; }

pg_ctl() { as_pg "$PG_BIN/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/server.log" "$@"; }

pg_running() { [[ -f $PGDIR/data/postmaster.pid ]] && pg_ctl status >/dev/null 2>&1; }

pg_start() {
  [[ -x $PG_BIN/initdb ]] || die "no PostgreSQL binaries in $PG_BIN (install postgresql-15, or set WARREN_CHAOS_PG_BIN)"
  if [[ -d $PGDIR/data ]] && pg_running; then
    say "PostgreSQL on $PORT is running from an earlier run; stopping it first"
    pg_ctl -m immediate stop >/dev/null
  fi
  rm -rf --one-file-system "$PGDIR"
  mkdir -p "$PGDIR"
  chown postgres:postgres "$PGDIR"
  as_pg "$PG_BIN/initdb" -D "$PGDIR/data" -U postgres --auth=trust -E UTF8 --no-instructions >"$PGDIR/initdb.log" 2>&1 ||
    { cat "$PGDIR/initdb.log" >&2; die "initdb failed"; }
  cat >>"$PGDIR/data/postgresql.conf" <<EOF
# Written by warren's chaos/services.sh: the chaos run's own cluster.
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$PGDIR'
max_connections = 200
EOF
  local started
  started=$(date +%s)
  pg_ctl -w -t 60 start >/dev/null
  as_pg "$PG_BIN/psql" -X -q -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -c 'create database chaos' >/dev/null
  say "PostgreSQL $(as_pg "$PG_BIN/postgres" --version | awk '{print $3}') ready in $(( $(date +%s) - started ))s: postgres://postgres@127.0.0.1:$PORT/chaos"
}

pg_stop() {
  [[ -d $PGDIR/data ]] || return 0
  pg_running && pg_ctl -m fast -w -t 60 stop >/dev/null || true
}

pg_restart() {
  local started
  started=$(date +%s)
  # immediate: the server stops as if it crashed, and recovers from its WAL.
  pg_ctl -m immediate -w stop >/dev/null
  pg_ctl -w -t 60 start >/dev/null
  say "PostgreSQL on $PORT restarted in $(( $(date +%s) - started ))s"
}

case ${1:-}:${2:-} in
  rabbit:start) rabbit_vars "${3:-}"; rabbit_start ;;
  rabbit:stop) rabbit_vars "${3:-}"; rabbit_stop ;;
  rabbit:restart) rabbit_vars "${3:-}"; rabbit_restart ;;
  pg:start) pg_vars "${3:-}"; pg_start ;;
  pg:stop) pg_vars "${3:-}"; pg_stop ;;
  pg:restart) pg_vars "${3:-}"; pg_restart ;;
  *) echo "usage: $0 rabbit start|stop|restart 3.10|4.0 | pg start|stop|restart PORT" >&2; exit 2 ;;
esac

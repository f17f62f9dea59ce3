#!/usr/bin/env bash
# The chaos run's own services: a RabbitMQ node (or a cluster of three) and a
# PostgreSQL cluster that nothing else on the machine uses, so that restarting
# them (which is the point of the run) disturbs no other work. They are started
# on demand, stopped at the end of every run, and their data removed.
#
#   chaos/services.sh rabbit  start|stop|restart|kill 3.10|4.0|4.3
#   chaos/services.sh rabbit  clean 3.10|4.0|4.3 [LOGDIR]
#   chaos/services.sh cluster start|stop | clean [LOGDIR]
#   chaos/services.sh cluster stop-node|start-node|kill-node c1|c2|c3
#   chaos/services.sh cluster restart-member c1|c2|c3 QUEUE
#   chaos/services.sh pg      start|stop|restart PORT | clean PORT [LOGDIR]
#
# kill is kill -9 of the node's Erlang VM, then a start on the same data.
# clean removes a stopped service's data, copying its logs to LOGDIR first.
#
# RabbitMQ 3.10 is the machine's own install, run as a second node (the
# recipe of DESIGN.md, "A RabbitMQ cluster on one machine"): node
# warren-chaos@localhost, AMQP 5690, management 15690, distribution 25690.
# RabbitMQ 4.0 and 4.3 are second nodes inside the project's chroots
# (scripts/rabbitmq4.sh builds them): warren-chaos4@localhost, AMQP 5691,
# management 15691, distribution 25691 in the 4.0 one; warren-chaos43@localhost,
# AMQP 5693, management 15693, distribution 25693 in the 4.3 one. None is ever
# joined to a cluster.
#
# The cluster is three more nodes of the machine's 3.10, warren-chaos-c1..c3@localhost
# on AMQP 5721-5723, management 15721-15723, distribution 25721-25723, which form
# one cluster by themselves (classic peer discovery). Names and ports of their
# own: the test suite's cluster (scripts/cluster.sh, 5701-5703) can run beside it.
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
RABBIT43_ROOT=${WARREN_RABBIT43_DIR:-/var/lib/warren/rabbit43}
RABBIT43_ROOT=${RABBIT43_ROOT%/}
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
      [[ -d $ROOT ]] || die "the RabbitMQ 4.0 chroot $ROOT is not built; run: bash scripts/rabbitmq4.sh build 4.0" ;;
    4.3)
      NODE=warren-chaos43@localhost AMQP_PORT=5693 MGMT_PORT=15693 DIST_PORT=25693
      ROOT=$RABBIT43_ROOT DIR=/var/lib/warren-chaos/rabbit-4.3
      [[ -d $ROOT ]] || die "the RabbitMQ 4.3 chroot $ROOT is not built; run: bash scripts/rabbitmq4.sh build 4.3" ;;
    *) die "unknown broker '$1' (use 3.10, 4.0 or 4.3)" ;;
  esac
  HOST_DIR=$ROOT$DIR
}

# Runs a RabbitMQ program (server, rabbitmqctl) as the rabbitmq user, with a
# clean environment naming only this node's files, in the chroot for 4.x.
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

# A 4.x node needs /proc in its chroot. scripts/rabbitmq4.sh mounts it for
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

# Writes a node's configuration into a fresh, empty directory (a start wipes the
# previous run's data). Extra lines (cluster formation) come as arguments.
rabbit_prepare() {
  rm -rf --one-file-system "$HOST_DIR"
  mkdir -p "$HOST_DIR/log" "$HOST_DIR/mnesia"
  # Statistics every 500 ms (default 5 s), so the run sees queues drain promptly.
  {
    cat <<EOF
# Written by warren's chaos/services.sh: the chaos run's own node.
listeners.tcp.default = 127.0.0.1:$AMQP_PORT
management.tcp.ip = 127.0.0.1
management.tcp.port = $MGMT_PORT
distribution.listener.interface = 127.0.0.1
collect_statistics_interval = 500
loopback_users = none
EOF
    local extra
    for extra in "$@"; do printf '%s\n' "$extra"; done
  } >"$HOST_DIR/rabbitmq.conf"
  echo '[rabbitmq_management].' >"$HOST_DIR/enabled_plugins"
  : >"$HOST_DIR/rabbitmq-env.conf"
  chown -R rabbitmq:rabbitmq "$HOST_DIR"
  [[ -z $ROOT ]] || chown -R rabbitmq:rabbitmq "$(dirname "$HOST_DIR")"
}

rabbit_version() { curl -fsS -u guest:guest "http://127.0.0.1:$MGMT_PORT/api/overview" | sed -nE 's/.*"rabbitmq_version":"([^"]*)".*/\1/p'; }

rabbit_start() {
  if node_registered; then
    say "node $NODE is running from an earlier run; stopping it first"
    rabbit_stop
  fi
  rabbit_prepare
  local started
  started=$(date +%s)
  rabbit_boot
  say "RabbitMQ $(rabbit_version) node $NODE ready in $(( $(date +%s) - started ))s: amqp://127.0.0.1:$AMQP_PORT, management http://127.0.0.1:$MGMT_PORT"
}

rabbit_stop() {
  local vm
  vm=$(vm_pid)
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
  # The node leaves epmd and closes its listeners before its VM has exited; a start
  # before then fails on the distribution port still in use.
  if [[ $vm =~ ^[0-9]+$ ]]; then
    deadline=$(( $(date +%s) + 30 ))
    while kill -0 "$vm" 2>/dev/null && (( $(date +%s) <= deadline )); do sleep 0.2; done
  fi
}

rabbit_restart() {
  local started
  started=$(date +%s)
  rabbit_stop
  rabbit_boot
  say "node $NODE restarted in $(( $(date +%s) - started ))s"
}

# kill -9 of the node's Erlang VM (beam.smp, whose pid the node writes to its pid
# file): no shutdown at all, as a machine crash or the OOM killer would end it. Then
# the node is started again on the same data.
# The pid of the node's VM: from its pid file, or the process listening on its
# distribution port (a start that failed may have removed the pid file).
vm_pid() {
  local pid
  pid=$(cat "$HOST_DIR/pid" 2>/dev/null || true)
  if ! [[ $pid =~ ^[0-9]+$ ]] || ! kill -0 "$pid" 2>/dev/null; then
    pid=$(ss -Hltnp "sport = :$DIST_PORT" 2>/dev/null | grep -o 'pid=[0-9]*' | head -n 1 | cut -d= -f2 || true)
  fi
  printf '%s' "$pid"
}

rabbit_kill() {
  local pid started
  pid=$(vm_pid)
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || die "node $NODE has no running process to kill (pid file: ${pid:-none})"
  started=$(date +%s%3N)
  kill -9 "$pid"
  local deadline=$(( $(date +%s) + 30 ))
  while kill -0 "$pid" 2>/dev/null || node_registered || amqp_ready "$AMQP_PORT"; do
    (( $(date +%s) <= deadline )) || die "node $NODE still there 30s after kill -9 of $pid"
    sleep 0.2
  done
  local dead=$(( $(date +%s%3N) - started ))
  rabbit_boot
  say "node $NODE killed (kill -9 of beam pid $pid, gone in ${dead}ms) and started again in $(( ($(date +%s%3N) - started) / 1000 ))s"
}

# Removes the node's data, its logs copied to DEST first when given.
rabbit_clean() {
  local dest=${1:-}
  if [[ -n $dest && -d $HOST_DIR/log ]]; then
    mkdir -p "$dest"
    cp -r "$HOST_DIR/log/." "$dest/" 2>/dev/null || true
  fi
  rm -rf --one-file-system "$HOST_DIR"
}

cluster_clean() {
  local n
  for n in "${CLUSTER_NODES[@]}"; do cluster_vars "$n"; rabbit_clean "${1:+$1/$n}"; done
  rm -rf --one-file-system "$BASE/cluster"
}

# --- RabbitMQ cluster ----------------------------------------------------------

# Three nodes of the machine's RabbitMQ 3.10 joined into one cluster, for the
# cluster run: warren-chaos-c1..c3@localhost, AMQP 5721-5723, management
# 15721-15723, distribution 25721-25723, data under $BASE/cluster. Names and
# ports of their own: the test cluster of scripts/cluster.sh (5701-5703) may
# run beside them.
CLUSTER_NODES=(c1 c2 c3)

cluster_vars() {
  [[ $1 =~ ^c[1-3]$ ]] || die "unknown cluster node '$1' (use c1, c2 or c3)"
  local n=${1#c}
  NODE=warren-chaos-c$n@localhost AMQP_PORT=$((5720 + n)) MGMT_PORT=$((15720 + n)) DIST_PORT=$((25720 + n))
  ROOT='' DIR=$BASE/cluster/c$n
  HOST_DIR=$DIR
}

# The cluster forms by itself from the configuration (classic peer discovery):
# c1 boots first, alone, and the others find it and join it on their first boot.
cluster_config() {
  local n
  printf '%s\n' 'cluster_formation.peer_discovery_backend = classic_config' \
    'cluster_formation.randomized_startup_delay_range.min = 0' \
    'cluster_formation.randomized_startup_delay_range.max = 1'
  for n in 1 2 3; do printf 'cluster_formation.classic_config.nodes.%s = warren-chaos-c%s@localhost\n' "$n" "$n"; done
}

# How many running members the first node that answers sees.
cluster_running() {
  local n
  for n in "${CLUSTER_NODES[@]}"; do
    cluster_vars "$n"
    if mgmt_ok; then
      curl -fsS -m 5 -u guest:guest "http://127.0.0.1:$MGMT_PORT/api/nodes?columns=name,running" 2>/dev/null |
        grep -o '"running":true' | grep -c . || true
      return 0
    fi
  done
  echo 0
}

cluster_start() {
  local n started
  started=$(date +%s)
  for n in "${CLUSTER_NODES[@]}"; do
    cluster_vars "$n"
    if node_registered; then
      say "node $NODE is running from an earlier run; stopping it first"
      rabbit_stop
    fi
  done
  rm -rf --one-file-system "$BASE/cluster"
  local lines
  mapfile -t lines < <(cluster_config)
  for n in "${CLUSTER_NODES[@]}"; do cluster_vars "$n"; rabbit_prepare "${lines[@]}"; done
  cluster_vars c1
  rabbit_boot
  local pids=()
  for n in c2 c3; do (cluster_vars "$n"; rabbit_boot) & pids+=($!); done
  for n in "${pids[@]}"; do wait "$n" || die "a cluster node did not come up"; done
  local deadline=$(( $(date +%s) + 120 ))
  until [[ $(cluster_running) == 3 ]]; do
    (( $(date +%s) <= deadline )) || die "the cluster did not form: $(cluster_running) of 3 nodes running members"
    sleep 1
  done
  cluster_vars c1
  say "RabbitMQ $(rabbit_version) cluster of 3 nodes ready in $(( $(date +%s) - started ))s: amqp://127.0.0.1:5721,5722,5723, management http://127.0.0.1:15721-15723"
}

# SIGTERM to the node's VM: a clean shutdown, without booting the CLI's own VM.
node_term() {
  local pid
  pid=$(vm_pid)
  if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; fi
}

# Stops every node at once.
cluster_stop() {
  local n pid pids=()
  for n in "${CLUSTER_NODES[@]}"; do cluster_vars "$n"; node_term; done
  for n in "${CLUSTER_NODES[@]}"; do (cluster_vars "$n"; rabbit_stop) & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid" || true; done
}

# One node: a clean stop; a start (it rejoins by itself) that waits until all
# three are running members again.
node_stop() {
  local started
  started=$(date +%s%3N)
  node_term
  rabbit_stop
  say "node $NODE stopped in $(( $(date +%s%3N) - started ))ms"
}

node_start() {
  local started
  started=$(date +%s)
  rabbit_boot
  wait_members
  say "node $NODE started and back in the cluster in $(( $(date +%s) - started ))s"
}

wait_members() {
  # cluster_running runs in a subshell: it leaves this node's variables alone.
  local deadline=$(( $(date +%s) + 120 ))
  until [[ $(cluster_running) == 3 ]]; do
    (( $(date +%s) <= deadline )) || die "node $NODE is up but the cluster has $(cluster_running) running members"
    sleep 0.5
  done
}

# Restarts one quorum queue's replica on a node (Ra stop and restart of the
# member): when it led the queue, another member is elected leader and starts
# the queue's dead-letter worker afresh. The run does this to a queue whose
# dead-lettered messages the broker has held for a while without moving them.
member_restart() {
  local queue=$1
  [[ $queue =~ ^[A-Za-z0-9._-]+$ ]] || die "queue name '$queue' is not one the run declares"
  as_rabbit rabbitmqctl -q -n "$NODE" eval "S = {'%2F_$queue', node()}, {ok, ok} = {ra:stop_server(quorum_queues, S), ra:restart_server(quorum_queues, S)}, ok." >/dev/null ||
    die "could not restart the replica of $queue on $NODE"
  say "replica of quorum queue $queue on $NODE restarted"
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

pg_clean() {
  local dest=${1:-}
  if [[ -n $dest && -f $PGDIR/server.log ]]; then
    mkdir -p "$dest"
    cp "$PGDIR/server.log" "$dest/"
  fi
  rm -rf --one-file-system "$PGDIR"
}

USAGE="usage: $0 rabbit start|stop|restart|kill 3.10|4.0|4.3 | rabbit clean 3.10|4.0|4.3 [LOGDIR] | cluster start|stop | cluster clean [LOGDIR] | cluster stop-node|start-node|kill-node c1|c2|c3 | cluster restart-member c1|c2|c3 QUEUE | pg start|stop|restart PORT | pg clean PORT [LOGDIR]"
case ${1:-}:${2:-} in
  rabbit:start) rabbit_vars "${3:-}"; rabbit_start ;;
  rabbit:stop) rabbit_vars "${3:-}"; rabbit_stop ;;
  rabbit:restart) rabbit_vars "${3:-}"; rabbit_restart ;;
  rabbit:kill) rabbit_vars "${3:-}"; rabbit_kill ;;
  rabbit:clean) rabbit_vars "${3:-}"; rabbit_clean "${4:-}" ;;
  cluster:start) cluster_start ;;
  cluster:stop) cluster_stop ;;
  cluster:clean) cluster_clean "${3:-}" ;;
  cluster:stop-node) cluster_vars "${3:-}"; node_stop ;;
  cluster:start-node) cluster_vars "${3:-}"; node_start ;;
  cluster:kill-node) cluster_vars "${3:-}"; rabbit_kill; wait_members ;;
  cluster:restart-member) cluster_vars "${3:-}"; member_restart "${4:-}" ;;
  pg:start) pg_vars "${3:-}"; pg_start ;;
  pg:stop) pg_vars "${3:-}"; pg_stop ;;
  pg:restart) pg_vars "${3:-}"; pg_restart ;;
  pg:clean) pg_vars "${3:-}"; pg_clean "${4:-}" ;;
  *) echo "$USAGE" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# A three-node RabbitMQ cluster on this machine, for the failover tests: three
# extra nodes of the machine's own RabbitMQ (the recipe of DESIGN.md, "A
# RabbitMQ cluster on one machine"), joined into one cluster.
#
#   node                 AMQP              management         distribution
#   warren-c1@localhost  127.0.0.1:5701    127.0.0.1:15701    25701
#   warren-c2@localhost  127.0.0.1:5702    127.0.0.1:15702    25702
#   warren-c3@localhost  127.0.0.1:5703    127.0.0.1:15703    25703
#
# Usage: scripts/cluster.sh start|stop|status [c1|c2|c3]
#
#   start        starts whatever node is down and joins any that is not a member
#                (quick when all three are up already)
#   stop         stops all three
#   status       prints the members and which of them run; exit 1 unless all do
#   start cN     starts one node (it rejoins the cluster by itself)
#   stop cN      stops one node (the tests do this to fail a node over)
#
# The nodes run as the rabbitmq user (so they share the machine node's Erlang
# cookie), each with its own directory under WARREN_CLUSTER_DIR (default
# /var/lib/warren/cluster). The machine's own rabbit@localhost is never
# touched: joining a cluster resets a node. Starting and stopping needs root.
set -euo pipefail

BASE=${WARREN_CLUSTER_DIR:-/var/lib/warren/cluster}
BASE=${BASE%/}
NODES=(c1 c2 c3)
# Long enough for three nodes booting at once on two busy cores.
BOOT_LIMIT=${WARREN_CLUSTER_BOOT_SECONDS:-180}

say() { printf 'cluster: %s\n' "$*"; }
die() { printf 'cluster: error: %s\n' "$*" >&2; exit 1; }

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Sets the node's name, ports and directory: node_vars c1|c2|c3.
node_vars() {
  local n=${1#c}
  [[ $1 =~ ^c[1-3]$ ]] || die "unknown node '$1' (use c1, c2 or c3)"
  NODE=warren-c$n@localhost AMQP_PORT=$((5700 + n)) MGMT_PORT=$((15700 + n)) DIST_PORT=$((25700 + n))
  DIR=$BASE/c$n
}

# Runs a RabbitMQ program as the rabbitmq user with a clean environment naming
# only this node's files. The Debian wrappers in /usr/sbin are bypassed: they
# would write the startup log of the machine's own node.
as_rabbit() {
  local prog=$1
  shift
  (cd "$DIR" && runuser -u rabbitmq -- env -i \
    PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/var/lib/rabbitmq LANG=C.UTF-8 \
    RABBITMQ_CONF_ENV_FILE="$DIR/rabbitmq-env.conf" \
    RABBITMQ_NODENAME="$NODE" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT="$AMQP_PORT" RABBITMQ_DIST_PORT="$DIST_PORT" \
    RABBITMQ_CONFIG_FILE="$DIR/rabbitmq" RABBITMQ_ENABLED_PLUGINS_FILE="$DIR/enabled_plugins" \
    RABBITMQ_MNESIA_BASE="$DIR/mnesia" RABBITMQ_LOG_BASE="$DIR/log" RABBITMQ_PID_FILE="$DIR/pid" \
    ERL_EPMD_ADDRESS=127.0.0.1 \
    "/usr/lib/rabbitmq/bin/$prog" "$@")
}

registered() { epmd -names 2>/dev/null | grep -q "^name ${NODE%@*} "; }
mgmt_ok() { curl -fsS -m 3 -u guest:guest "http://127.0.0.1:$MGMT_PORT/api/overview" >/dev/null 2>&1; }
up() { amqp_ready "$AMQP_PORT" && mgmt_ok; }

# The cluster as one running node's management API sees it: "name running" per
# member, or nothing when no node answers.
members() {
  local n
  for n in "${NODES[@]}"; do
    node_vars "$n"
    if mgmt_ok; then
      curl -fsS -m 5 -u guest:guest "http://127.0.0.1:$MGMT_PORT/api/nodes?columns=name,running" |
        node -e 'for (const n of JSON.parse(require("fs").readFileSync(0, "utf8"))) console.log(n.name, n.running)'
      return 0
    fi
  done
}

# True when all three nodes answer and each is a running member.
healthy() {
  local n m
  m=$(members) || return 1
  for n in "${NODES[@]}"; do
    node_vars "$n"
    up || return 1
    grep -qx "$NODE true" <<<"$m" || return 1
  done
}

# Writes a node's configuration; its data, if any, is kept.
prepare() {
  mkdir -p "$DIR/log" "$DIR/mnesia"
  cat >"$DIR/rabbitmq.conf" <<EOF
# Written by warren's scripts/cluster.sh: one node of the test cluster.
listeners.tcp.default = 127.0.0.1:$AMQP_PORT
management.tcp.ip = 127.0.0.1
management.tcp.port = $MGMT_PORT
distribution.listener.interface = 127.0.0.1
collect_statistics_interval = 1000
loopback_users = none
EOF
  echo '[rabbitmq_management].' >"$DIR/enabled_plugins"
  : >"$DIR/rabbitmq-env.conf"
  chown -R rabbitmq:rabbitmq "$BASE"
}

# Starts the node in the background (it returns before the node is ready).
boot() {
  if registered; then return 0; fi
  prepare
  as_rabbit rabbitmq-server -detached </dev/null >"$DIR/start.log" 2>&1 || {
    cat "$DIR/start.log" >&2
    die "rabbitmq-server -detached failed for $NODE"
  }
}

wait_up() {
  local deadline=$(( $(date +%s) + BOOT_LIMIT ))
  until up; do
    if (( $(date +%s) > deadline )); then
      say "node $NODE not ready after ${BOOT_LIMIT}s; last lines of its log:" >&2
      tail -n 20 "$DIR"/log/*.log "$DIR/start.log" >&2 2>/dev/null || true
      return 1
    fi
    sleep 0.5
  done
}

stop_node() {
  node_vars "$1"
  if registered; then
    # SIGTERM stops the node as rabbitmqctl shutdown does (applications in order,
    # clients' connections closed), without booting the CLI's own Erlang VM, which
    # took up to a minute on two busy cores.
    local pid
    pid=$(cat "$DIR/pid" 2>/dev/null || true)
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid"
    else
      as_rabbit rabbitmqctl -q -n "$NODE" shutdown >/dev/null 2>&1 || true
    fi
  fi
  local deadline=$(( $(date +%s) + 60 ))
  while registered || amqp_ready "$AMQP_PORT"; do
    if (( $(date +%s) > deadline )); then
      local pid
      pid=$(cat "$DIR/pid" 2>/dev/null || true)
      say "node $NODE did not stop within 60s; killing its process ${pid:-(no pid file)}" >&2
      [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.3
  done
}

# Joins node $1 to warren-c1 unless it is a member already.
join() {
  node_vars "$1"
  [[ $1 == c1 ]] && return 0
  if members | grep -q "^$NODE "; then return 0; fi
  say "joining $NODE to warren-c1@localhost"
  # The CLI prints the node's boot warnings; they go to the node's join.log.
  local step
  for step in stop_app reset "join_cluster warren-c1@localhost" start_app; do
    # shellcheck disable=SC2086 # the step is a command and its argument
    as_rabbit rabbitmqctl -q -n "$NODE" $step >>"$DIR/join.log" 2>&1 ||
      { tail -n 20 "$DIR/join.log" >&2; die "rabbitmqctl $step failed on $NODE"; }
  done
  wait_up
}

start_all() {
  if healthy; then
    say "already running: $(members | awk '$2 == "true" {print $1}' | paste -sd ' ')"
    return 0
  fi
  local started n
  started=$(date +%s)
  # All at once: a node that was stopped with the others waits for its peers.
  for n in "${NODES[@]}"; do node_vars "$n"; boot; done
  local ok=1
  for n in "${NODES[@]}"; do node_vars "$n"; wait_up || ok=0; done
  if (( ! ok )); then
    # Data left by an interrupted run that will not boot: start from nothing.
    say "starting from empty data directories"
    for n in "${NODES[@]}"; do stop_node "$n"; done
    rm -rf --one-file-system "$BASE"
    for n in "${NODES[@]}"; do node_vars "$n"; boot; done
    for n in "${NODES[@]}"; do node_vars "$n"; wait_up || die "node $NODE did not come up"; done
  fi
  for n in "${NODES[@]}"; do join "$n"; done
  healthy || { status >&2; die "the cluster did not form"; }
  say "RabbitMQ cluster ready in $(( $(date +%s) - started ))s: amqp://127.0.0.1:5701,5702,5703, management http://127.0.0.1:15701"
}

status() {
  local m n state
  m=$(members)
  [[ -n $m ]] || { say "not running (no node answers on 15701-15703)"; return 1; }
  for n in "${NODES[@]}"; do
    node_vars "$n"
    state=$(awk -v n="$NODE" '$1 == n {print ($2 == "true" ? "running" : "stopped")}' <<<"$m")
    printf '%s\t%s\tamqp://127.0.0.1:%s\t%s\n' "$NODE" "${state:-not a member}" "$AMQP_PORT" "http://127.0.0.1:$MGMT_PORT"
  done
  healthy
}

need_root() { [[ $EUID -eq 0 ]] || die "the nodes run as the rabbitmq user, which needs root; run: sudo bash $0 $*"; }

case ${1:-}:${2:-} in
  start:) need_root start; lease_keep cluster; start_all ;;
  stop:) need_root stop; for n in "${NODES[@]}"; do stop_node "$n"; done; say "stopped" ;;
  status:) status ;;
  start:c[1-3]) need_root start "$2"; node_vars "$2"; boot; wait_up; say "node $NODE running" ;;
  stop:c[1-3]) need_root stop "$2"; stop_node "$2"; say "node $NODE stopped" ;;
  *) echo "usage: $0 start|stop|status [c1|c2|c3]" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# RabbitMQ over TLS on this machine, for the amqps:// tests: a throwaway CA, a
# server and a client certificate made with openssl, and two small nodes of
# the machine's RabbitMQ that listen for TLS only.
#
#   node                   amqps              distribution  client certificate
#   warren-tls@localhost   127.0.0.1:5711     25711         checked when given
#   warren-tlsc@localhost  127.0.0.1:5712     25712         required
#
# (RabbitMQ applies one ssl_options to all of a node's TLS listeners, so the
# port that requires a client certificate is a node of its own.) Both verify
# a client certificate against the throwaway CA (verify_peer), and know one
# user, warren, whose password is in $DIR/password.
#
# Usage: scripts/tls.sh start|stop|status
#
# Files go to WARREN_TLS_DIR (default /var/lib/warren/tls): ca.pem,
# server.pem/server.key (CN localhost, names localhost and 127.0.0.1),
# client.pem/client.key, client.enc.key (the same key encrypted with the
# passphrase in client.passphrase), password, and the nodes' directories.
# Certificates are made once and kept; delete the directory for new ones.
# Starting and stopping needs root (the nodes run as the rabbitmq user).
set -euo pipefail

DIR=${WARREN_TLS_DIR:-/var/lib/warren/tls}
DIR=${DIR%/}
NODES=(tls tlsc)
BOOT_LIMIT=${WARREN_TLS_BOOT_SECONDS:-180}

say() { printf 'tls: %s\n' "$*"; }
die() { printf 'tls: error: %s\n' "$*" >&2; exit 1; }

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Sets a node's name, port and directory: node_vars tls|tlsc.
node_vars() {
  case $1 in
    tls) NODE=warren-tls@localhost PORT=5711 DIST_PORT=25711 REQUIRE=false ;;
    tlsc) NODE=warren-tlsc@localhost PORT=5712 DIST_PORT=25712 REQUIRE=true ;;
    *) die "unknown node '$1' (use tls or tlsc)" ;;
  esac
  NODE_DIR=$DIR/node-$1
}

# --- certificates --------------------------------------------------------------

certificates() {
  [[ -s $DIR/ca.pem && -s $DIR/server.pem && -s $DIR/client.pem && -s $DIR/client.enc.key && -s $DIR/password ]] && return 0
  say "making a throwaway CA, a server and a client certificate in $DIR"
  mkdir -p "$DIR"
  local tmp
  tmp=$(mktemp -d)
  (
    cd "$tmp"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj '/CN=warren test CA' \
      -keyout ca.key -out ca.pem -addext 'basicConstraints=critical,CA:TRUE' \
      -addext 'keyUsage=critical,keyCertSign,cRLSign' 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj '/CN=localhost' -keyout server.key -out server.csr 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 -extfile server.ext -out server.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj '/CN=warren-client' -keyout client.key -out client.csr 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n' >client.ext
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 -extfile client.ext -out client.pem 2>/dev/null
    openssl rand -hex 12 >client.passphrase
    openssl pkey -in client.key -aes256 -passout "file:client.passphrase" -out client.enc.key
    openssl rand -hex 16 >password
    rm -f ./*.csr ./*.ext ./*.srl
  )
  # Throwaway material for a test machine: readable by any local user, except
  # the CA's key (nothing needs it after this) and the server's (the broker's).
  install -m 0644 "$tmp"/{ca.pem,server.pem,client.pem,client.key,client.enc.key,client.passphrase,password} "$DIR/"
  install -m 0600 "$tmp/ca.key" "$DIR/ca.key"
  install -m 0640 -g rabbitmq "$tmp/server.key" "$DIR/server.key"
  rm -rf "$tmp"
}

# --- nodes -------------------------------------------------------------------

as_rabbit() {
  local prog=$1
  shift
  (cd "$NODE_DIR" && runuser -u rabbitmq -- env -i \
    PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/var/lib/rabbitmq LANG=C.UTF-8 \
    RABBITMQ_CONF_ENV_FILE="$NODE_DIR/rabbitmq-env.conf" \
    RABBITMQ_NODENAME="$NODE" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_DIST_PORT="$DIST_PORT" \
    RABBITMQ_CONFIG_FILE="$NODE_DIR/rabbitmq" RABBITMQ_ENABLED_PLUGINS_FILE="$NODE_DIR/enabled_plugins" \
    RABBITMQ_MNESIA_BASE="$NODE_DIR/mnesia" RABBITMQ_LOG_BASE="$NODE_DIR/log" RABBITMQ_PID_FILE="$NODE_DIR/pid" \
    ERL_EPMD_ADDRESS=127.0.0.1 \
    "/usr/lib/rabbitmq/bin/$prog" "$@")
}

registered() { epmd -names 2>/dev/null | grep -q "^name ${NODE%@*} "; }

# True when the port completes a TLS handshake (with the client certificate)
# and answers the AMQP protocol header with connection.start.
amqps_ready() {
  node -e '
    const [dir, port] = process.argv.slice(1);
    const fs = require("fs");
    const s = require("tls").connect({ host: "127.0.0.1", port: +port, servername: "localhost",
      ca: fs.readFileSync(dir + "/ca.pem"), cert: fs.readFileSync(dir + "/client.pem"), key: fs.readFileSync(dir + "/client.key") },
      () => s.write(Buffer.from("AMQP\x00\x00\x09\x01", "latin1")));
    s.setTimeout(4000, () => process.exit(1));
    s.on("error", () => process.exit(1));
    s.on("data", (d) => process.exit(d[0] === 1 ? 0 : 1));' "$DIR" "$PORT" 2>/dev/null
}

boot() {
  registered && return 0
  mkdir -p "$NODE_DIR/log" "$NODE_DIR/mnesia"
  cat >"$NODE_DIR/rabbitmq.conf" <<EOF
# Written by warren's scripts/tls.sh: a TLS-only node for the amqps:// tests.
listeners.tcp = none
listeners.ssl.default = 127.0.0.1:$PORT
distribution.listener.interface = 127.0.0.1
ssl_options.cacertfile = $DIR/ca.pem
ssl_options.certfile = $DIR/server.pem
ssl_options.keyfile = $DIR/server.key
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = $REQUIRE
loopback_users = none
default_user = warren
default_pass = $(cat "$DIR/password")
EOF
  echo '[].' >"$NODE_DIR/enabled_plugins"
  : >"$NODE_DIR/rabbitmq-env.conf"
  chown -R rabbitmq:rabbitmq "$NODE_DIR"
  as_rabbit rabbitmq-server -detached </dev/null >"$NODE_DIR/start.log" 2>&1 || {
    cat "$NODE_DIR/start.log" >&2
    die "rabbitmq-server -detached failed for $NODE"
  }
}

wait_up() {
  local deadline=$(( $(date +%s) + BOOT_LIMIT ))
  until amqps_ready; do
    if (( $(date +%s) > deadline )); then
      say "node $NODE not ready after ${BOOT_LIMIT}s; last lines of its log:" >&2
      tail -n 20 "$NODE_DIR"/log/*.log "$NODE_DIR/start.log" >&2 2>/dev/null || true
      return 1
    fi
    sleep 0.5
  done
}

stop_node() {
  node_vars "$1"
  registered || return 0
  # SIGTERM stops the node as rabbitmqctl shutdown does, without the CLI's own VM.
  local pid
  pid=$(cat "$NODE_DIR/pid" 2>/dev/null || true)
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
  else
    as_rabbit rabbitmqctl -q -n "$NODE" shutdown >/dev/null 2>&1 || true
  fi
  local deadline=$(( $(date +%s) + 60 ))
  while registered; do
    if (( $(date +%s) > deadline )); then
      local pid
      pid=$(cat "$NODE_DIR/pid" 2>/dev/null || true)
      say "node $NODE did not stop within 60s; killing its process ${pid:-(no pid file)}" >&2
      [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.3
  done
}

start_all() {
  certificates
  local n all=1 started
  for n in "${NODES[@]}"; do node_vars "$n"; amqps_ready || all=0; done
  if (( all )); then say "already running: amqps://127.0.0.1:5711 and :5712 (client certificate required)"; return 0; fi
  started=$(date +%s)
  for n in "${NODES[@]}"; do node_vars "$n"; boot; done
  for n in "${NODES[@]}"; do node_vars "$n"; wait_up || die "node $NODE did not come up"; done
  say "TLS nodes ready in $(( $(date +%s) - started ))s: amqps://127.0.0.1:5711, amqps://127.0.0.1:5712 (client certificate required); CA $DIR/ca.pem"
}

status() {
  local n ok=0
  for n in "${NODES[@]}"; do
    node_vars "$n"
    if amqps_ready; then printf '%s\trunning\tamqps://127.0.0.1:%s\n' "$NODE" "$PORT"; else printf '%s\tdown\tamqps://127.0.0.1:%s\n' "$NODE" "$PORT"; ok=1; fi
  done
  return "$ok"
}

need_root() { [[ $EUID -eq 0 ]] || die "the nodes run as the rabbitmq user, which needs root; run: sudo bash $0 $1"; }

case ${1:-} in
  start) need_root start; lease_keep tls; start_all ;;
  stop) need_root stop; for n in "${NODES[@]}"; do stop_node "$n"; done; say "stopped" ;;
  status) certificates 2>/dev/null || true; status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac

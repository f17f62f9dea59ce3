#!/usr/bin/env bash
# Make sure the services the tests talk to are up: the host's RabbitMQ (the
# 3.10 that Debian 12 ships) on 127.0.0.1:5672 with its management API on
# 15672, and PostgreSQL on 127.0.0.1:5432 with a database named "test".
# Safe to run again and again: it only acts on what is missing, and prints
# one line per service when all is well.
#
# As root it starts (or installs) what is missing. As anyone else it prints
# the exact commands to run and exits 1.
set -euo pipefail

AMQP_PORT=5672
MGMT_URL=http://127.0.0.1:15672
PG_PORT=5432
PG_DB="test"

say() { printf 'services: %s\n' "$*"; }
is_root() { [[ $EUID -eq 0 ]]; }

# Commands a non-root user has to run; printed together at the end.
todo=()

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

overview() {
  curl -fsS -m 5 -u guest:guest "$MGMT_URL/api/overview" 2>/dev/null
}
mgmt_answers() { overview >/dev/null; }

# wait_for SECONDS WHAT COMMAND...: poll until the command succeeds.
wait_for() {
  local limit=$1 what=$2 deadline
  shift 2
  deadline=$(( $(date +%s) + limit ))
  until "$@"; do
    if (( $(date +%s) > deadline )); then
      say "$what did not come up within ${limit}s" >&2
      return 1
    fi
    sleep 1
  done
}

rabbitmq() {
  if ! amqp_ready "$AMQP_PORT"; then
    if ! command -v rabbitmq-server >/dev/null; then
      if ! is_root; then
        todo+=("sudo apt-get update && sudo apt-get install -y rabbitmq-server"
               "sudo rabbitmq-server -detached")
        return
      fi
      say "installing rabbitmq-server from Debian's packages"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >/dev/null
    fi
    # The package may have started it already (on a machine with an init
    # system); only start it when AMQP still does not answer.
    if ! amqp_ready "$AMQP_PORT"; then
      if ! is_root; then
        todo+=("sudo rabbitmq-server -detached")
        return
      fi
      say "starting RabbitMQ"
      # -detached: it outlives this script; it closes its own stdio.
      rabbitmq-server -detached </dev/null >/dev/null 2>&1
    fi
    # await_startup needs the node's cookie, readable by root only; the
    # AMQP check below is what really matters to the tests.
    timeout 120 rabbitmqctl -q await_startup >/dev/null 2>&1 || true
    wait_for 120 "RabbitMQ on $AMQP_PORT" amqp_ready "$AMQP_PORT"
  fi

  if ! mgmt_answers; then
    # Enabling a plugin on a running node works online; it takes effect at
    # once and is remembered in enabled_plugins for the next boot.
    if ! is_root; then
      todo+=("sudo rabbitmq-plugins enable rabbitmq_management")
      return
    fi
    say "enabling rabbitmq_management"
    rabbitmq-plugins -q enable rabbitmq_management >/dev/null
    wait_for 60 "the management API at $MGMT_URL" mgmt_answers
  fi

  local version
  version=$(overview | sed -nE 's/.*"rabbitmq_version":"([^"]*)".*/\1/p')
  case $version in
    3.10.*) ;;
    *) say "warning: RabbitMQ on $AMQP_PORT reports version '$version', the tests label it 3.10" >&2 ;;
  esac
  say "RabbitMQ $version amqp://127.0.0.1:$AMQP_PORT, management $MGMT_URL"
}

pg_answers() {
  pg_isready -q -h 127.0.0.1 -p "$PG_PORT"
}

postgres() {
  if ! command -v pg_isready >/dev/null; then
    if is_root; then
      say "installing postgresql from Debian's packages"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    else
      todo+=("sudo apt-get update && sudo apt-get install -y postgresql")
      return
    fi
  fi
  if ! pg_answers; then
    # The cluster that owns port 5432, whatever its version.
    local cluster
    cluster=$(pg_lsclusters -h | awk -v port="$PG_PORT" '$3 == port { print $1 " " $2; exit }')
    [[ -n $cluster ]] || { say "no PostgreSQL cluster is configured on port $PG_PORT" >&2; exit 1; }
    if ! is_root; then
      todo+=("sudo pg_ctlcluster --skip-systemctl-redirect $cluster start")
      return
    fi
    say "starting PostgreSQL $cluster"
    # shellcheck disable=SC2086 # "version name", two words on purpose
    pg_ctlcluster --skip-systemctl-redirect $cluster start
    wait_for 60 "PostgreSQL on $PG_PORT" pg_answers
  fi

  # The tests use postgres://postgres@127.0.0.1:5432/test (trust auth).
  local psql=(psql -X -q -t -A -h 127.0.0.1 -p "$PG_PORT" -U postgres)
  if [[ $("${psql[@]}" -d postgres -c "select 1 from pg_database where datname = '$PG_DB'") != 1 ]]; then
    say "creating database $PG_DB"
    "${psql[@]}" -d postgres -c "create database $PG_DB"
  fi
  say "PostgreSQL $("${psql[@]}" -d "$PG_DB" -c 'show server_version' | cut -d' ' -f1)" \
      "postgres://postgres@127.0.0.1:$PG_PORT/$PG_DB"
}

rabbitmq
postgres

if (( ${#todo[@]} )); then
  say "some services are missing; as root, run:" >&2
  printf '  %s\n' "${todo[@]}" >&2
  exit 1
fi

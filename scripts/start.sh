#!/usr/bin/env bash
# What `npm start` runs: the demo (examples/demo.ts) against a local RabbitMQ,
# on a Debian machine that may have nothing yet but Node.js. It installs the
# npm dependencies if they are missing and makes sure a RabbitMQ answers on
# 127.0.0.1:5672, installing Debian's rabbitmq-server when running as root.
# Without root it prints the commands to run and stops.
set -euo pipefail

cd "$(dirname "$0")/.."

say() { printf 'start: %s\n' "$*"; }
is_root() { [[ $EUID -eq 0 ]]; }

# --- Node.js and dependencies ----------------------------------------------
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  say "Node.js 20 or newer, with npm, is needed first (https://nodejs.org)" >&2
  exit 1
fi
# shellcheck source=scripts/lib.sh
source scripts/lib.sh
install_deps_and_addons

# With systemd, the service manager owns the broker; in a container or a
# chroot there is none, and the broker starts itself in the background.
start_cmd() {
  if [[ -d /run/systemd/system ]]; then
    echo "systemctl start rabbitmq-server"
  else
    echo "rabbitmq-server -detached"
  fi
}

if ! amqp_ready 5672; then
  if ! command -v rabbitmq-server >/dev/null; then
    if ! is_root; then
      say "no RabbitMQ on 127.0.0.1:5672 and none installed; run:" >&2
      echo "  sudo apt-get update && sudo apt-get install -y rabbitmq-server" >&2
      echo "  sudo $(start_cmd)   # if the install did not start it" >&2
      echo "then npm start again." >&2
      exit 1
    fi
    say "installing rabbitmq-server from Debian's packages"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y rabbitmq-server
    command -v rabbitmq-server >/dev/null ||
      { say "rabbitmq-server is still not on PATH after the install" >&2; exit 1; }
  fi
  # The package starts the broker itself where there is an init system.
  if ! amqp_ready 5672; then
    if ! is_root; then
      say "RabbitMQ is installed but not running; run:" >&2
      echo "  sudo $(start_cmd)" >&2
      echo "then npm start again." >&2
      exit 1
    fi
    say "starting RabbitMQ: $(start_cmd)"
    read -r -a cmd <<<"$(start_cmd)"
    "${cmd[@]}" </dev/null >/dev/null
  fi
  say "waiting for RabbitMQ on 127.0.0.1:5672"
  for (( i = 0; i < 120; i++ )); do
    amqp_ready 5672 && break
    sleep 1
  done
  amqp_ready 5672 || { say "RabbitMQ did not answer on 5672 within 120s; see /var/log/rabbitmq/" >&2; exit 1; }
fi
say "RabbitMQ answers on 127.0.0.1:5672"

# --- the demo ----------------------------------------------------------------
# Two tours: the delay ladder and the parked queue, then the retry table; then the
# operator console over both, until Ctrl-C. The console is skipped (and npm start
# ends by itself) when stdin is not a terminal, as in CI, or with
# WARREN_DEMO_NO_CONSOLE=1.
npx --no-install tsx examples/demo.ts
echo
if [[ -t 0 && -z "${WARREN_DEMO_NO_CONSOLE:-}" ]]; then
  npx --no-install tsx examples/retry-table.ts
  echo
  # exec: Ctrl-C and SIGTERM reach the console, which closes its connections cleanly.
  exec npx --no-install tsx examples/console.ts
fi
# exec: Ctrl-C and SIGTERM reach the tour, which shuts its consumer down cleanly.
exec npx --no-install tsx examples/retry-table.ts

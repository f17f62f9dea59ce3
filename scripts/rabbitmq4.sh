#!/usr/bin/env bash
# RabbitMQ 4.x brokers beside the host's 3.10, for running the test suite
# against several versions. Debian 12 only ships 3.10, and there is no Docker
# here, so each 4.x broker lives in a chroot of the Debian release that ships
# it, built with debootstrap from Debian's own packages. All brokers share the
# host's network and its epmd; they differ by node name and ports:
#
#   version  Debian          node               AMQP   management  distribution
#   4.0      13 (trixie)     rabbit4@localhost  5673   15673       25673
#   4.3      forky           rabbit43@localhost 5674   15674       25674
#
# (all on 127.0.0.1).
#
# Usage: scripts/rabbitmq4.sh [start|stop|status|build] [4.0|4.3]
#        (start and 4.0 are the defaults; the two words go in either order;
#        build only builds the chroot when it is missing, and starts nothing)
#
# Each chroot is built once, outside the repository, so every clone on the
# machine reuses it: WARREN_RABBIT4_DIR (default /var/lib/warren/rabbit4) for
# 4.0, WARREN_RABBIT43_DIR (default /var/lib/warren/rabbit43) for 4.3.
#
# The Debian mirror is the one the host's apt sources name (deb822 "URIs:" or
# one-line "deb"), or WARREN_DEBIAN_MIRROR when set; with neither, building
# fails and says so. Nothing is fetched from a mirror nobody configured.
set -euo pipefail

ACTION=start VERSION=4.0
for arg in "$@"; do
  case $arg in
    start | stop | status | build) ACTION=$arg ;;
    4.0 | 4.3) VERSION=$arg ;;
    *) echo "usage: $0 [start|stop|status|build] [4.0|4.3]" >&2; exit 2 ;;
  esac
done

# What differs per version. forky (Debian testing) needs three things trixie
# does not: Debian 12's debootstrap has no script for it (sid's fits); its
# Release file may be past its Valid-Until date on a mirror snapshot; and the
# node's name resolution needs an /etc/hosts naming localhost (copied from the
# host, or written, for every version).
case $VERSION in
  4.0)
    DIR=${WARREN_RABBIT4_DIR:-/var/lib/warren/rabbit4}
    SUITE=trixie NODE=rabbit4@localhost AMQP_PORT=5673 MGMT_PORT=15673 DIST_PORT=25673
    SKIP_VALID_UNTIL=0
    ;;
  4.3)
    DIR=${WARREN_RABBIT43_DIR:-/var/lib/warren/rabbit43}
    SUITE=forky NODE=rabbit43@localhost AMQP_PORT=5674 MGMT_PORT=15674 DIST_PORT=25674
    SKIP_VALID_UNTIL=1
    ;;
esac
DIR=${DIR%/}
# The build goes to a side directory and is renamed into place only when it
# is complete, so "$DIR exists" always means "usable".
PARTIAL="$DIR.partial"
LOCK="$DIR.lock"
LOG="$DIR.build.log"
START_LOG="$DIR.start.log"

log() { printf 'rabbitmq %s: %s\n' "$VERSION" "$*"; }
die() { printf 'rabbitmq %s: error: %s\n' "$VERSION" "$*" >&2; exit 1; }

# --- checks that need no root ---------------------------------------------

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The management API's overview, or failure if it does not answer guest:guest.
overview() {
  curl -fsS -m 5 -u guest:guest "http://127.0.0.1:$MGMT_PORT/api/overview" 2>/dev/null
}

broker_version() {
  overview | sed -nE 's/.*"rabbitmq_version":"([^"]*)".*/\1/p'
}

# --- helpers for root ----------------------------------------------------

require_root() {
  if [[ $EUID -ne 0 ]]; then
    log "building and starting the $VERSION broker needs root (debootstrap, mount, chroot)."
    log "run:  sudo bash $(realpath "$0") ${1:-start} $VERSION"
    exit 1
  fi
}

# Run a command inside the chroot with a clean environment, so that nothing
# from the host (RABBITMQ_*, ERL_*, a node_modules PATH) leaks into it.
in_chroot() {
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 TERM=dumb \
    DEBIAN_FRONTEND=noninteractive chroot "$DIR_IN_USE" "$@"
}
DIR_IN_USE=$DIR

# The broker needs /proc (Erlang's memory monitor and the startup scripts read
# it); nothing else from the host is mounted. mountpoint keeps a second run
# from stacking another proc on top of the first.
mount_proc() {
  local root=$1
  if ! mountpoint -q "$root/proc"; then
    mount -t proc proc "$root/proc"
  fi
}

# Unmount everything below a directory, deepest first. Used before deleting or
# renaming a chroot, so rm can never reach into a mounted filesystem.
unmount_under() {
  local root
  root=$(realpath "$1")
  # grep finds nothing when nothing is mounted: not a failure (set -e, pipefail).
  findmnt -rn -o TARGET | { grep -E "^$root/" || true; } | sort -r | while read -r target; do
    umount "$target" || umount -l "$target"
  done
}

# True when this version's node is registered with epmd, i.e. a beam for it is
# running even if it is still booting and not yet listening on AMQP.
node_registered() {
  in_chroot epmd -names 2>/dev/null | grep -q "^name ${NODE%@*} "
}

# The Debian mirror: WARREN_DEBIAN_MIRROR, else the first Debian mirror the
# host's apt sources name (deb822 "URIs:" or one-line "deb"), so the chroot is
# fetched from the same place as everything else. With neither, it fails
# saying which to set: a machine that names no mirror may have no access to a
# public one, or must not use it.
host_mirror() {
  if [[ -n ${WARREN_DEBIAN_MIRROR:-} ]]; then
    echo "$WARREN_DEBIAN_MIRROR"
    return
  fi
  local uri
  uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
            /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | sed -nE 's/^(URIs:|deb([[:space:]]+\[[^]]*\])?)[[:space:]]+([^[:space:]]+).*/\3/p' \
        | grep -E '^https?://[^ ]*/debian/?$' | head -n1 || true)
  if [[ -z $uri ]]; then
    die "no Debian mirror to build the $SUITE chroot from: the host's apt sources" \
        "(/etc/apt/sources.list, /etc/apt/sources.list.d/) name none. Set" \
        "WARREN_DEBIAN_MIRROR to one, e.g. WARREN_DEBIAN_MIRROR=http://deb.debian.org/debian," \
        "or add a Debian mirror to the host's apt sources"
  fi
  echo "$uri"
}

# The debootstrap script for the suite: its own when this debootstrap has one,
# else sid's (Debian 12's debootstrap predates forky; a testing suite is built
# like unstable).
debootstrap_script() {
  local scripts=/usr/share/debootstrap/scripts
  if [[ -e $scripts/$SUITE ]]; then echo "$scripts/$SUITE"; else echo "$scripts/sid"; fi
}

# apt-get in the chroot. For forky the Release file's Valid-Until is not
# checked: a mirror snapshot keeps serving a testing Release past that date.
# Its signature still is.
chroot_apt() {
  if (( SKIP_VALID_UNTIL )); then
    in_chroot apt-get -o Acquire::Check-Valid-Until=false "$@"
  else
    in_chroot apt-get "$@"
  fi
}

# Run a long step with its output going to the build log, printing a line
# every 30 s so a person (or CI) can see it is not stuck.
HEARTBEAT=
run_step() {
  local what=$1 started
  shift
  started=$(date +%s)
  log "$what ..."
  # The heartbeat must neither keep the lock (fd 9) nor leave a sleep behind
  # holding our stdout open, so it closes 9 and kills its sleep on TERM.
  (
    nap=
    trap 'kill "${nap:-}" 2>/dev/null; exit 0' TERM
    while :; do
      sleep 30 & nap=$!
      wait "$nap"
      log "  ... $what, $(( $(date +%s) - started ))s so far"
    done
  ) 9>&- &
  HEARTBEAT=$!
  local rc=0
  "$@" >>"$LOG" 2>&1 || rc=$?
  kill "$HEARTBEAT" 2>/dev/null || true
  wait "$HEARTBEAT" 2>/dev/null || true
  HEARTBEAT=
  if [[ $rc -ne 0 ]]; then
    log "$what failed (exit $rc); last lines of $LOG:"
    tail -n 30 "$LOG" >&2
    exit "$rc"
  fi
  log "  done in $(( $(date +%s) - started ))s"
}
trap '[[ -n $HEARTBEAT ]] && kill "$HEARTBEAT" 2>/dev/null; true' EXIT

# On 4.3 the features it deprecates are refused outright, even those it still
# permits by default, so that the suite proves warren uses none of them.
deprecations() {
  [[ $VERSION == 4.3 ]] || return 0
  cat <<'EOF'
deprecated_features.permit.global_qos = false
deprecated_features.permit.transient_nonexcl_queues = false
deprecated_features.permit.queue_master_locator = false
EOF
}

write_config() {
  local root=$1
  # rabbitmq-env.conf is read by the server and by rabbitmqctl alike, so the
  # CLI inside the chroot finds this node without -n. The host's epmd
  # already holds 127.0.0.1:4369; this node simply registers with it. If the
  # host broker is down, the chroot starts its own epmd, on loopback only,
  # as the host's configuration asks for.
  cat >"$root/etc/rabbitmq/rabbitmq-env.conf" <<EOF
# Written by warren's scripts/rabbitmq4.sh: RabbitMQ $VERSION beside the host's broker.
NODENAME=$NODE
NODE_IP_ADDRESS=127.0.0.1
NODE_PORT=$AMQP_PORT
DIST_PORT=$DIST_PORT
ERL_EPMD_ADDRESS=127.0.0.1
EOF
  cat >"$root/etc/rabbitmq/rabbitmq.conf" <<EOF
# Written by warren's scripts/rabbitmq4.sh: RabbitMQ $VERSION beside the host's broker.
listeners.tcp.local = 127.0.0.1:$AMQP_PORT
management.tcp.ip = 127.0.0.1
management.tcp.port = $MGMT_PORT
distribution.listener.interface = 127.0.0.1
$(deprecations)
EOF
  # Enabled before the first boot, so the broker comes up with it.
  echo '[rabbitmq_management].' >"$root/etc/rabbitmq/enabled_plugins"
}

# The chroot shares the host's process table and uid space. Left to itself,
# the package picks the next free system uid inside the chroot, which on this
# kind of machine is the host's postgres uid: ps then shows the broker as
# postgres, and anything aimed at the postgres user would hit it. So the
# chroot's rabbitmq user takes the host's rabbitmq uid/gid when there is one,
# otherwise a system id free both on the host and in the chroot.
id_free() {  # id_free passwd|group ID
  ! getent "$1" "$2" >/dev/null && ! in_chroot getent "$1" "$2" >/dev/null
}
add_rabbitmq_user() {
  local uid='' gid='' n
  if getent passwd rabbitmq >/dev/null; then
    uid=$(id -u rabbitmq)
    gid=$(id -g rabbitmq)
    in_chroot getent passwd "$uid" >/dev/null && uid=''
    in_chroot getent group "$gid" >/dev/null && gid=''
  fi
  for (( n = 999; n >= 100 && (${#uid} == 0 || ${#gid} == 0); n-- )); do
    [[ -z $uid ]] && id_free passwd "$n" && [[ $n != "$gid" ]] && uid=$n
    [[ -z $gid ]] && id_free group "$n" && [[ $n != "$uid" ]] && gid=$n
  done
  [[ -n $uid && -n $gid ]] || die "found no free uid/gid for the chroot's rabbitmq user"
  in_chroot groupadd --system --gid "$gid" rabbitmq
  in_chroot useradd --system --uid "$uid" --gid rabbitmq --no-create-home \
    --home-dir /var/lib/rabbitmq --shell /usr/sbin/nologin \
    --comment 'RabbitMQ messaging server' rabbitmq
}

build() {
  command -v debootstrap >/dev/null || {
    log "installing debootstrap"
    # One at a time: the 4.0 and 4.3 builds may start side by side, and apt holds a lock.
    mkdir -p /var/lib/warren
    flock /var/lib/warren/apt.lock bash -c 'command -v debootstrap >/dev/null || { apt-get -o DPkg::Lock::Timeout=300 update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq debootstrap >/dev/null; }'
  }
  local mirror started
  mirror=$(host_mirror)   # first: without one, nothing is made
  if [[ -e $PARTIAL ]]; then
    log "removing an unfinished build at $PARTIAL"
    unmount_under "$PARTIAL"
    rm -rf --one-file-system "$PARTIAL"
  fi
  mkdir -p "$PARTIAL"
  : >"$LOG"
  started=$(date +%s)
  log "building a Debian $SUITE chroot with RabbitMQ $VERSION in $DIR from $mirror (a few minutes, once per machine)"

  run_step "debootstrap $SUITE" \
    debootstrap --variant=minbase "$SUITE" "$PARTIAL" "$mirror" "$(debootstrap_script)"

  DIR_IN_USE=$PARTIAL
  cp /etc/resolv.conf "$PARTIAL/etc/resolv.conf"
  # A minbase chroot has no /etc/hosts, and without one naming localhost the
  # node does not boot ("epmd error for host localhost: nxdomain").
  if grep -qE '^[[:space:]]*127\.0\.0\.1[[:space:]]+(.*[[:space:]])?localhost([[:space:]]|$)' /etc/hosts 2>/dev/null; then
    cp /etc/hosts "$PARTIAL/etc/hosts"
  else
    printf '127.0.0.1 localhost\n::1 localhost\n' >"$PARTIAL/etc/hosts"
  fi
  if (( SKIP_VALID_UNTIL )); then
    # So apt in the chroot works later too, by hand.
    echo 'Acquire::Check-Valid-Until "false";' >"$PARTIAL/etc/apt/apt.conf.d/99warren-valid-until"
  fi
  # Keep package scripts from starting the broker during the install: it
  # would come up with the default config on 5672, which is the host's.
  printf '#!/bin/sh\nexit 101\n' >"$PARTIAL/usr/sbin/policy-rc.d"
  chmod 755 "$PARTIAL/usr/sbin/policy-rc.d"
  mount_proc "$PARTIAL"
  add_rabbitmq_user

  run_step "apt-get update in the chroot" chroot_apt update
  run_step "installing rabbitmq-server in the chroot" \
    chroot_apt install -y --no-install-recommends rabbitmq-server
  in_chroot apt-get clean

  write_config "$PARTIAL"
  unmount_under "$PARTIAL"
  mv "$PARTIAL" "$DIR"
  DIR_IN_USE=$DIR
  # shellcheck disable=SC2016 # a dpkg-query format, not shell
  log "chroot built in $(( $(date +%s) - started ))s: $(in_chroot dpkg-query -W -f '${Package} ${Version}' rabbitmq-server)"
}

# Wait until the node answers AMQP and its management API logs guest in.
wait_ready() {
  local deadline=$(( $(date +%s) + 180 )) seen=0
  local logfile="$DIR/var/log/rabbitmq/$NODE.log"
  until amqp_ready "$AMQP_PORT" && overview >/dev/null; do
    if node_registered; then
      seen=1
    elif [[ $seen -eq 1 ]]; then
      log "the node stopped while booting; last lines of $START_LOG and $logfile:"
      tail -n 10 "$START_LOG" >&2 || true
      tail -n 30 "$logfile" >&2 || true
      exit 1
    fi
    if (( $(date +%s) > deadline )); then
      log "not ready after 180s; last lines of $START_LOG and $logfile:"
      tail -n 10 "$START_LOG" >&2 || true
      tail -n 30 "$logfile" >&2 || true
      exit 1
    fi
    sleep 1
  done
}

report_running() {
  local version
  version=$(broker_version)
  case $version in
    "$VERSION" | "$VERSION".*) log "RabbitMQ $version running: amqp://127.0.0.1:$AMQP_PORT, http://127.0.0.1:$MGMT_PORT" ;;
    *) die "something answers on $AMQP_PORT/$MGMT_PORT but reports version '${version:-unknown}', not $VERSION" ;;
  esac
}

# One build, start or stop at a time, across clones and concurrent runs
# (a stop unmounting /proc under a broker that another run is booting kills
# that boot). Held on fd 9 until this script exits.
take_lock() {
  mkdir -p "$(dirname "$DIR")"
  exec 9>"$LOCK"
  if ! flock -n 9; then
    log "another run holds $LOCK (building, starting or stopping); waiting for it"
    flock -w 1800 9 || die "gave up waiting for $LOCK after 30 minutes"
  fi
}

cmd_start() {
  lease_keep "rabbitmq-$VERSION"
  if amqp_ready "$AMQP_PORT" && overview >/dev/null; then
    report_running
    return
  fi
  require_root start
  take_lock
  [[ -d $DIR ]] || build
  # Written at every start, so a chroot built before a change of it gets it.
  write_config "$DIR"
  mount_proc "$DIR"

  local started
  started=$(date +%s)
  if node_registered; then
    log "node $NODE is already up; waiting for it to be ready"
  else
    log "starting $NODE"
    # -detached: the broker keeps running after this script exits. 9>&-: it
    # must not inherit the lock's descriptor, or it holds the lock forever.
    in_chroot sh -c 'cd / && exec rabbitmq-server -detached' \
      </dev/null >"$START_LOG" 2>&1 9>&-
  fi
  wait_ready
  log "  ready in $(( $(date +%s) - started ))s"
  report_running
}

cmd_stop() {
  [[ -d $DIR ]] || { log "not built ($DIR does not exist)"; return; }
  require_root stop
  take_lock
  if node_registered; then
    log "stopping $NODE"
    # shutdown (unlike stop) waits until the broker's OS process has exited.
    in_chroot rabbitmqctl -q shutdown >/dev/null
  else
    log "$NODE is not running"
  fi
  # Leave nothing mounted once the broker is down, unless another node runs
  # from this chroot (the chaos run's): it needs /proc.
  local others deadline=$(( $(date +%s) + 10 ))
  # The node's helpers (erl_child_setup, inet_gethost) exit just after it.
  while others=$(chroot_processes) && [[ -n $others ]] && (( $(date +%s) < deadline )); do sleep 0.5; done
  if [[ -n $others ]]; then
    log "leaving $DIR/proc mounted: other processes run in the chroot ($others)"
  else
    unmount_under "$DIR"
  fi
}

# The pids of processes whose root is the chroot, space-separated.
chroot_processes() {
  local root p pids=()
  root=$(realpath "$DIR")
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/root" 2>/dev/null) == "$root" ]] && pids+=("${p#/proc/}")
  done
  echo "${pids[*]}"
}

cmd_build() {
  if [[ -d $DIR ]]; then
    log "chroot already built: $DIR"
    return
  fi
  require_root build
  take_lock
  [[ -d $DIR ]] || build
}

cmd_status() {
  if [[ -d $DIR ]]; then
    log "chroot: $DIR"
  else
    log "chroot: not built ($DIR does not exist; 'start' builds it)"
  fi
  if amqp_ready "$AMQP_PORT" && overview >/dev/null; then
    report_running
  else
    log "not running (nothing answers AMQP on $AMQP_PORT with management on $MGMT_PORT)"
    return 3
  fi
}

case $ACTION in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  build) cmd_build ;;
esac

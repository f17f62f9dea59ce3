# shellcheck shell=bash
# Sourced by the other scripts (which define `say`): what they share.

# True when something on the port (default 5672) answers the AMQP 0-9-1
# protocol header with a method frame on channel 0 (connection.start), not
# merely accepts TCP.
amqp_ready() {
  local reply
  # shellcheck disable=SC2016 # expanded by the inner bash, on purpose
  reply=$(timeout 5 bash -c '
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf "AMQP\x00\x00\x09\x01" >&3
    head -c 3 <&3 | od -An -tx1' _ "${1:-5672}" 2>/dev/null) || return 1
  [[ ${reply//[[:space:]]/} == 010000 ]]
}

# Installs the npm dependencies when node_modules is missing.
install_deps() {
  [[ -d node_modules ]] && return 0
  say "installing dependencies"
  # npm ci is the reproducible install, but it refuses a lockfile that has
  # drifted from package.json in the smallest way; npm install copes. Only
  # the reason is shown, not the usage text npm ci prints after it.
  local ci_log
  ci_log=$(mktemp)
  if [[ -f package-lock.json ]] && npm ci --no-audit --no-fund >"$ci_log" 2>&1; then
    cat "$ci_log"
  else
    if [[ -f package-lock.json ]]; then
      say "npm ci refused, falling back to npm install:"
      sed '/Clean install a project/q' "$ci_log" | grep -vE '^npm error *$|Clean install' | head -n 8
    fi
    npm install --no-audit --no-fund
  fi
  rm -f "$ci_log"
}

# Installs the npm dependencies when node_modules is missing, and rebuilds
# better-sqlite3 when it does not load. It is a native addon built at install time
# (package.json's allowScripts lets npm 11 run its build); a Node upgrade leaves
# it unloadable.
install_deps_and_addons() {
  install_deps
  if [[ -d node_modules/better-sqlite3 ]] &&
     ! node -e "new (require('better-sqlite3'))(':memory:').close()" 2>/dev/null; then
    say "rebuilding better-sqlite3"
    npm rebuild better-sqlite3
  fi
}

# --- brokers a test run started ---------------------------------------------
# npm test stops, when it ends, the brokers it had to start itself (the 4.x
# chroot brokers, the test cluster, the TLS nodes), unless WARREN_KEEP_BROKERS=1.
# Runs may overlap and share a broker: each holds a lease on the brokers it
# uses (a file named after its pid), and a broker that a run started is stopped
# by the last run to let go of it. A broker that was up before (started by a
# person, or kept) is never stopped. Leases live under WARREN_LEASE_DIR
# (default /var/lib/warren/leases), one directory per broker.
LEASES=${WARREN_LEASE_DIR:-/var/lib/warren/leases}

# The start time of a process (ticks since boot), which tells it from a later
# process given the same pid; fails when there is no such process.
proc_start() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  # shellcheck disable=SC2086 # split into fields on purpose
  set -- $stat
  echo "${20}"
}

# lease_take NAME: this run (pid $$) uses broker NAME. Taken before looking
# whether it runs, under the lease lock, so that a last run stopping it either
# finishes first (and this run starts it again) or sees this lease and keeps it.
lease_take() {
  mkdir -p "$LEASES/$1"
  (
    flock -w 600 8 || exit 1
    echo "$$ $(proc_start $$)" >"$LEASES/$1/run.$$"
  ) 8>"$LEASES/$1.lock"
}

# lease_started NAME: this run started broker NAME; the last run out stops it.
lease_started() { : >"$LEASES/$1/started-by-a-run"; }

# lease_keep NAME: a person started broker NAME (a script run by hand, not by
# npm test): no run stops it.
lease_keep() {
  [[ -n ${WARREN_TEST_RUN:-} ]] && return 0
  rm -f "$LEASES/$1/started-by-a-run" 2>/dev/null || true
}

# lease_release NAME STOP-COMMAND...: this run is done with broker NAME. Runs
# the stop command when a run started the broker and no other run holds a
# lease; with WARREN_KEEP_BROKERS=1 nothing is stopped, and the broker counts
# as started by hand from then on. Prints what it did.
lease_release() {
  local name=$1
  shift
  [[ -d $LEASES/$name ]] || return 0
  (
    flock -w 600 8 || exit 1
    rm -f "$LEASES/$name/run.$$"
    [[ -e $LEASES/$name/started-by-a-run ]] || exit 0
    if [[ ${WARREN_KEEP_BROKERS:-} == 1 ]]; then
      rm -f "$LEASES/$name/started-by-a-run"
      say "keeping $name running (WARREN_KEEP_BROKERS=1)"
      exit 0
    fi
    local f pid start
    for f in "$LEASES/$name"/run.*; do
      [[ -e $f ]] || continue
      read -r pid start <"$f" || true
      if [[ -n $pid && $(proc_start "$pid" 2>/dev/null) == "$start" ]]; then
        say "leaving $name running: another test run (pid $pid) uses it"
        exit 0
      fi
      rm -f "$f"   # a run that ended without letting go (killed)
    done
    rm -f "$LEASES/$name/started-by-a-run"
    say "stopping $name (this run started it; WARREN_KEEP_BROKERS=1 keeps it)"
    "$@" >/dev/null 2>&1 || say "could not stop $name: $* failed" >&2
  ) 8>"$LEASES/$name.lock"
}

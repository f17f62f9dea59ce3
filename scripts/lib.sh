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

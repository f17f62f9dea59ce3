# Sourced by start.sh and test.sh (which define `say`): installs the npm
# dependencies when node_modules is missing.
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

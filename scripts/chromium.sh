#!/usr/bin/env bash
# Makes sure Debian's Chromium is installed, for the console's browser tests (they drive
# it with playwright-core, which never downloads a browser of its own), and prints its
# path on stdout; everything else goes to stderr, so `path=$(bash scripts/chromium.sh)`.
# Idempotent: an installed Chromium is only looked up.
#
# As root it installs what is missing (apt-get update once, then the package); as anyone
# else it prints the command and exits 1. WARREN_CHROMIUM names another binary to use.
set -euo pipefail

say() { printf 'chromium: %s\n' "$*" >&2; }

find_chromium() {
  local c
  for c in "${WARREN_CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
    if [[ -n $c && -x $c ]]; then
      printf '%s\n' "$c"
      return 0
    fi
  done
  command -v chromium 2>/dev/null || command -v chromium-browser 2>/dev/null
}

if path=$(find_chromium); then
  printf '%s\n' "$path"
  exit 0
fi
if [[ $EUID -ne 0 ]]; then
  say "Chromium is missing; install it with: sudo apt-get update && sudo apt-get install -y chromium"
  exit 1
fi
say "installing Chromium (Debian package chromium)"
export DEBIAN_FRONTEND=noninteractive
apt-get update >/dev/null
apt-get install -y chromium >/dev/null
path=$(find_chromium) || { say "the chromium package installed no chromium binary" >&2; exit 1; }
say "installed $("$path" --version 2>/dev/null || echo "$path")"
printf '%s\n' "$path"

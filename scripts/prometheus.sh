#!/usr/bin/env bash
# Makes sure promtool (Prometheus's rule checker and rule test runner) is installed:
# the tests of the shipped alert rules and dashboard (monitoring/) run it. Debian's
# `prometheus` package carries it. The Prometheus server that package also installs is
# not started here (nothing in the tests needs one running).
#
# As root it installs what is missing; as anyone else it prints the command and exits 1.
set -euo pipefail

say() { printf 'prometheus: %s\n' "$*"; }

if command -v promtool >/dev/null 2>&1; then
  say "promtool $(promtool --version 2>&1 | head -n 1 | awk '{print $3}') is installed"
  exit 0
fi
if [[ $EUID -ne 0 ]]; then
  say "promtool is missing; install it with: sudo apt-get install -y --no-install-recommends prometheus" >&2
  exit 1
fi
say "installing promtool (Debian package prometheus)"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends prometheus >/dev/null; then
  apt-get update >/dev/null
  apt-get install -y --no-install-recommends prometheus >/dev/null
fi
command -v promtool >/dev/null 2>&1 || { say "the prometheus package installed no promtool" >&2; exit 1; }
say "promtool installed"

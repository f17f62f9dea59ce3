#!/usr/bin/env bash
# What `npm run chaos` runs: installs the npm dependencies when they are missing,
# then chaos/run.ts, which starts the run's own RabbitMQ node and PostgreSQL
# cluster (chaos/services.sh), runs the pipeline under faults, checks it and
# stops them again. Arguments go to chaos/run.ts (--help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf 'chaos: %s\n' "$*"; }
# shellcheck source=scripts/lib.sh
source scripts/lib.sh
install_deps
if [[ -d node_modules/better-sqlite3 ]] &&
   ! node -e "new (require('better-sqlite3'))(':memory:').close()" 2>/dev/null; then
  say "rebuilding better-sqlite3"
  npm rebuild better-sqlite3
fi
exec npx --no-install tsx chaos/run.ts "$@"

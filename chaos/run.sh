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
install_deps_and_addons
exec npx --no-install tsx chaos/run.ts "$@"

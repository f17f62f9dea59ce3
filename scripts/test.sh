#!/usr/bin/env bash
# What `npm test` runs: the whole suite against three RabbitMQ versions, the
# host's 3.10 (what Debian 12 ships), 4.0 (Debian 13) and 4.3 (Debian forky,
# the current series) in chroots beside it, because they behave differently
# where warren cares (x-death, delivery limits and counts, queue types); see
# docs/brokers.md.
#
#   npm test                       all three brokers, all tests
#   npm test -- src/consume        extra arguments go to vitest
#   WARREN_TEST_BROKERS=4.3 npm test          one broker only
#   WARREN_TEST_BROKERS=3.10,4.3 npm test     some of them
#   WARREN_KEEP_BROKERS=1 npm test            leave running what the run started
#
# The brokers this run had to start (4.x chroots, the test cluster, the TLS
# nodes) are stopped when it ends, unless WARREN_KEEP_BROKERS=1 or another
# run still uses them (scripts/lib.sh, "brokers a test run started"); those
# that were up before are left as they were.
#
# Ends with one line, "tests: N passed, N failed[, N skipped]", summed over
# the runs, and exits non-zero if any run failed or ran no test at all.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
results="$root/.warren/test-results"   # .warren/ is git-ignored

say() { printf 'test: %s\n' "$*"; }

# --- which brokers ---------------------------------------------------------
list=${WARREN_TEST_BROKERS:-3.10 4.0 4.3}
read -r -a brokers <<<"${list//,/ }"   # "3.10 4.3" or "3.10,4.3"
for b in "${brokers[@]}"; do
  case $b in
    3.10 | 4.0 | 4.3) ;;
    *) say "WARREN_TEST_BROKERS: unknown broker '$b' (use 3.10, 4.0 and/or 4.3)" >&2; exit 2 ;;
  esac
done
(( ${#brokers[@]} )) || { say "WARREN_TEST_BROKERS is empty" >&2; exit 2; }

# --- dependencies ----------------------------------------------------------
# shellcheck source=scripts/lib.sh
source scripts/lib.sh
install_deps_and_addons

# --- services --------------------------------------------------------------
# PostgreSQL (and the 3.10 broker) come from services.sh even when only 4.x
# is tested: the store tests need the database either way. They are the
# machine's own services, left running.
bash scripts/services.sh
bash scripts/prometheus.sh   # promtool, for the tests of monitoring/
bash scripts/chromium.sh >/dev/null   # Chromium, for the browser tests of the console (test/console)

# Brokers this run starts are stopped when it ends (see the top of this file).
export WARREN_TEST_RUN=$$
leased=()
release_all() {
  local name
  for name in "${leased[@]}"; do
    case $name in
      rabbitmq-4.*) lease_release "$name" bash scripts/rabbitmq4.sh stop "${name#rabbitmq-}" ;;
      cluster) lease_release cluster bash scripts/cluster.sh stop ;;
      tls) lease_release tls bash scripts/tls.sh stop ;;
    esac
  done
  leased=()
}
trap 'release_all || true' EXIT
trap 'exit 130' INT TERM
# use NAME STATUS-COMMAND -- START-COMMAND: takes a lease on the broker, and
# starts it (noting that this run did) when its status says it is not up.
use() {
  local name=$1 status=() start=()
  shift
  while [[ $1 != -- ]]; do status+=("$1"); shift; done
  shift
  start=("$@")
  lease_take "$name" || { say "could not take a lease on $name under $LEASES" >&2; return 1; }
  leased+=("$name")
  "${status[@]}" >/dev/null 2>&1 && return 0
  "${start[@]}" || return 1
  lease_started "$name"
}

for b in "${brokers[@]}"; do
  [[ $b == 4.* ]] || continue
  if ! use "rabbitmq-$b" bash scripts/rabbitmq4.sh status "$b" -- bash scripts/rabbitmq4.sh start "$b"; then
    say "the RabbitMQ $b broker is not available; fix that, or test against" \
        "the others only, e.g. WARREN_TEST_BROKERS=3.10" >&2
    exit 1
  fi
done

# The failover and TLS tests run in the 3.10 run, on nodes of the machine's
# RabbitMQ of their own: a three-node cluster and two TLS-only nodes. Started
# side by side; quick when they are up already. A test whose nodes are not up
# is skipped and says why.
if [[ " ${brokers[*]} " == *" 3.10 "* ]]; then
  # Leases first (in this shell, so release_all sees them), then the starts.
  lease_take cluster && leased+=(cluster)
  lease_take tls && leased+=(tls)
  ( bash scripts/cluster.sh status >/dev/null 2>&1 || { bash scripts/cluster.sh start && lease_started cluster; } ) & cluster_pid=$!
  ( bash scripts/tls.sh status >/dev/null 2>&1 || { bash scripts/tls.sh start && lease_started tls; } ) & tls_pid=$!
  wait "$cluster_pid" || say "the test cluster did not start: test/cluster/failover.test.ts will be skipped" >&2
  wait "$tls_pid" || say "the TLS nodes did not start: src/connection/tls.test.ts will be skipped" >&2
fi

# --- build -----------------------------------------------------------------
npm run --silent build

# --- tests -----------------------------------------------------------------
mkdir -p "$results"
passed=0 failed=0 skipped=0 status=0 outside=()

for broker in "${brokers[@]}"; do
  case $broker in
    3.10) amqp_port=5672 mgmt_port=15672 ;;
    4.0) amqp_port=5673 mgmt_port=15673 ;;
    4.3) amqp_port=5674 mgmt_port=15674 ;;
  esac
  json="$results/broker-$broker.json"
  rm -f "$json"
  echo
  say "=== RabbitMQ $broker (amqp://127.0.0.1:$amqp_port) ==="
  rc=0
  WARREN_TEST_BROKER=$broker \
  WARREN_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:$amqp_port \
  WARREN_TEST_MGMT_URL=http://guest:guest@127.0.0.1:$mgmt_port \
  WARREN_TEST_PG_URL=${WARREN_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/test} \
    npx --no-install vitest run \
      --reporter=default --reporter=json --outputFile.json="$json" "$@" || rc=$?

  # Counts from vitest's JSON report. A test file that fails to load has no
  # failed test in it, yet fails the run: it counts as one failure, so the
  # closing line never reads "0 failed" for a red run. A missing report
  # (vitest died before writing it) is a failure too.
  if counts=$(node -e '
      const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
      const broken = r.testResults.filter(f => f.status === "failed" &&
        !f.assertionResults.some(a => a.status === "failed")).length;
      console.log(r.numPassedTests, r.numFailedTests + broken,
                  r.numPendingTests + r.numTodoTests);' "$json" 2>/dev/null); then
    read -r p f s <<<"$counts"
  else
    say "no JSON report from vitest at $json" >&2
    p=0 f=1 s=0
  fi
  # vitest exits non-zero on an error outside any test (an unhandled error after a
  # file's tests, say) while its report counts every test passed: one failure more.
  if (( rc != 0 && f == 0 && p > 0 )); then
    f=1; outside+=("$broker")
    say "RabbitMQ $broker: errors outside any test (see vitest's output)" >&2
  fi
  passed=$(( passed + p )) failed=$(( failed + f )) skipped=$(( skipped + s ))

  if (( p == 0 && f == 0 )); then
    say "RabbitMQ $broker: no test ran (vitest exit $rc)" >&2
    status=1
  elif (( rc != 0 || f > 0 )); then
    say "RabbitMQ $broker: vitest failed (exit $rc)" >&2
    status=1
  fi
done

# The names of what failed, last, so that the tail of a long log says which
# test to look at (vitest prints them once, hundreds of lines up).
if (( status != 0 )); then
  for broker in "${brokers[@]}"; do
    node -e '
      const fs = require("fs");
      const [file, broker, root] = process.argv.slice(1);
      if (!fs.existsSync(file)) process.exit(0);
      const r = JSON.parse(fs.readFileSync(file, "utf8"));
      for (const f of r.testResults) {
        const name = f.name.startsWith(root + "/") ? f.name.slice(root.length + 1) : f.name;
        const failed = f.assertionResults.filter(a => a.status === "failed");
        if (f.status === "failed" && failed.length === 0)
          console.log(`failed (${broker}): ${name}: ${(f.message || "did not load").split("\n")[0]}`);
        for (const a of failed)
          console.log(`failed (${broker}): ${name} > ${a.fullName}: ${(a.failureMessages[0] || "").split("\n")[0].slice(0, 300)}`);
      }' "$results/broker-$broker.json" "$broker" "$root" || true
  done
  for broker in "${outside[@]}"; do
    echo "failed ($broker): an error outside any test; vitest printed it under \"Unhandled Errors\""
  done
fi

# Before the closing line, which stays the last one.
release_all

echo
line="tests: $passed passed, $failed failed"
if (( skipped )); then line+=", $skipped skipped"; fi
echo "$line"
exit "$status"

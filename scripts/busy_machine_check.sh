#!/usr/bin/env bash
# The suite on a busy machine: run tests while stress-ng keeps CPUs busy (not part of `make test`).
#
#   bash scripts/busy_machine_check.sh [pytest args]    (default: tests/workers tests/faults tests/flows)
#
# Waits in the tests are for events, bounded by a generous deadline (tests/support/waiting.py);
# this is how to check they still hold when other work takes the CPUs. Environment:
# STRESS_CPUS (stress-ng --cpu, default 2), STRESS_SECONDS (its --timeout, default 600; it is
# stopped when the tests end), TEST_DATABASE_URL and TEST_REDIS_URL as for `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
: "${TEST_DATABASE_URL:?set TEST_DATABASE_URL (postgres://...)}"
: "${TEST_REDIS_URL:?set TEST_REDIS_URL (redis://...)}"

if ! command -v stress-ng >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "[busy] installing stress-ng"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null
  else
    echo "[busy] stress-ng is missing: apt-get install stress-ng"; exit 1
  fi
fi
bash scripts/ensure_services.sh

stress-ng --cpu "${STRESS_CPUS:-2}" --timeout "${STRESS_SECONDS:-600}" --quiet &
stress_pid=$!
trap 'kill "$stress_pid" 2>/dev/null || true' EXIT
[ $# -gt 0 ] || set -- tests/workers tests/faults tests/flows
echo "[busy] stress-ng --cpu ${STRESS_CPUS:-2} running (pid $stress_pid); pytest $*"
DEBUG=1 DATABASE_URL="$TEST_DATABASE_URL" REDIS_URL="$TEST_REDIS_URL" \
  "$PY" -m pytest -p no:cacheprovider "$@"

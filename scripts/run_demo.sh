#!/usr/bin/env bash
# Serve the demo (`make run`): a Celery worker with embedded beat in the background, the Django
# development server beside it; Ctrl-C (or SIGTERM) stops both, and so does the server exiting.
#
# Without a broker (no REDIS_URL / CELERY_BROKER_URL) no worker is started: Celery runs tasks
# eagerly (task_always_eager) in the web process right after the commit that scheduled them, so
# the demo works on a bare machine. See docs/payments-and-saga.md.
set -euo pipefail
set -m  # every background job gets its own process group, stopped as a whole below
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
PORT=${PORT:-8000}
# The demo runs with development settings (production is the default: config/settings.py).
export DEBUG=1
# The simulated provider confirms each payment by itself after this many seconds (0: never;
# then use `manage.py simulate_payment ORDER_ID`).
export SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS=${SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS:-2}

pids=()
stop_all() {
  # the job's process group, or the job alone if it had no group of its own yet
  for pid in "${pids[@]}"; do
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -n "${REDIS_URL:-}${CELERY_BROKER_URL:-}${REDIS_SHARDS:-}" ]; then
  schedule="$(mktemp -d)/celerybeat-schedule"
  "$PY" -m celery -A config worker --beat --schedule "$schedule" --pool=prefork --concurrency 2 \
    --loglevel INFO &
  pids+=("$!")
  echo "[demo] Celery worker with beat started (pid $!)"
  echo "[demo] beat purges expired data every ${RETENTION_PURGE_SECONDS:-3600} s (docs/data-protection.md)"
else
  echo "[demo] no broker configured: Celery tasks run eagerly in the web process"
  # No beat without a broker: a loop here runs the same retention purge on the same schedule.
  # Its output goes nowhere, so a stray `sleep` can never hold the terminal's (or a pipe's) output.
  (while true; do
    "$PY" manage.py purge_expired_data || true
    sleep "${RETENTION_PURGE_SECONDS:-3600}"
  done) >/dev/null 2>&1 &
  pids+=("$!")
  echo "[demo] expired data is purged at start and every ${RETENTION_PURGE_SECONDS:-3600} s (docs/data-protection.md)"
fi
if [ "$SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS" != "0" ]; then
  echo "[demo] the simulated provider confirms each payment ${SIMULATED_PAYMENT_AUTO_COMPLETE_SECONDS} s after it starts (PAYING, then PAID)"
fi
if [ -z "${REDIS_URL:-}${REDIS_SHARDS:-}${REDIS_CLUSTER_URL:-}" ]; then
  echo "[demo] no Redis: pre-issued idempotency tokens (POST /api/v1/idempotency-tokens/) answer"
  echo "[demo]   503 IDEMPOTENCY_TOKENS_UNAVAILABLE, because they live in Redis. Send your own"
  echo "[demo]   Idempotency-Key instead (a fresh UUID v4 per operation, reused on retries),"
  echo "[demo]   or start Redis and set REDIS_URL=redis://127.0.0.1:6379/0 to use tokens."
fi

"$PY" manage.py runserver "127.0.0.1:$PORT" &
pids+=("$!")
wait "$!"

#!/usr/bin/env bash
# Make sure the services the test suite talks to are installed and running:
# PostgreSQL on 127.0.0.1:5432 and Redis on 127.0.0.1:6379 (plus redis-server for the extra
# shard/cluster nodes the tests start themselves). Installs missing Debian packages when root.
set -euo pipefail

say() { echo "[services] $*"; }
need_apt=()
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v pg_ctlcluster >/dev/null || need_apt+=(postgresql)
command -v npm >/dev/null || need_apt+=(nodejs npm)  # the TypeScript client's tests (clients/)
if [ "${#need_apt[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing ${need_apt[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    say "missing ${need_apt[*]}: install them (apt-get install ${need_apt[*]}) and re-run"; exit 1
  fi
fi

if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  say "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main start || true
  for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.5; done
fi
pg_isready -q -h 127.0.0.1 -p 5432 || { say "PostgreSQL is not reachable on 127.0.0.1:5432"; exit 1; }

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  say "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 1 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.2; done
fi
redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null || { say "Redis is not reachable on 127.0.0.1:6379"; exit 1; }
say "PostgreSQL and Redis are up"

# Headless Chromium for the browser tests (tests/browser, Playwright drives Debian's package; no
# `playwright install` download). Without it those tests skip and say why.
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing chromium (browser tests)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
      || say "could not install chromium: the browser tests will be skipped"
  else
    say "chromium is missing (apt-get install chromium): the browser tests will be skipped"
  fi
fi

# Graphviz's dot: draws the order lifecycle diagram (manage.py draw_order_lifecycle); its test
# renders once. Without it that one test skips and says why.
if ! command -v dot >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing graphviz (lifecycle diagram)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz >/dev/null; } \
      || say "could not install graphviz: the diagram rendering test will be skipped"
  else
    say "graphviz is missing (apt-get install graphviz): the diagram rendering test will be skipped"
  fi
fi

# promtool (Debian's prometheus package): checks and unit-tests the alerting rules
# (tests/observability/test_alert_rules.py). Without it those tests skip and say why.
if ! command -v promtool >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing prometheus (promtool, alert rules)"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; } \
      || say "could not install prometheus: the alert rule tests will be skipped"
  else
    say "promtool is missing (apt-get install prometheus): the alert rule tests will be skipped"
  fi
fi

# wrk: the load generator of bench/http_load.py and of its smoke test (tests/bench/).
if ! command -v wrk >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing wrk"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
  else
    say "missing wrk: install it (apt-get install wrk) and re-run"; exit 1
  fi
fi

# PgBouncer: tests/flows/test_pgbouncer.py starts its own, in transaction mode on a free loopback
# port, with the configuration docs/scaling.md documents ("Fleet setup"). Only the binary is
# needed: the tests never use the service that Debian's package also installs.
if ! command -v pgbouncer >/dev/null && [ ! -x /usr/sbin/pgbouncer ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing pgbouncer"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
  else
    say "missing pgbouncer: install it (apt-get install pgbouncer) and re-run"; exit 1
  fi
fi

"""Instructions per request, counted by valgrind: a worker's CPU cost a busy machine cannot move.

    .venv/bin/python -m bench.instructions [--cases plain,order_create] [--requests 30]

Requests per second on a shared 2-core guest move by up to a third between runs of the same
code (docs/benchmarks.md), so a change worth a few per cent cannot be seen there. valgrind's
callgrind counts the instructions a process executes, which do not depend on what else runs.

Each case runs twice in a child process under ``valgrind --tool=callgrind``, with the settings
of ``bench/http_load.py``'s servers (DEBUG off, persistent database connection, one Redis
node): the WSGI application called in a loop, as ``bench/cpu_per_request.py`` does, ``WARMUP``
requests and then N requests, and then the same with 3 N. The difference of the two totals,
divided by 2 N, is one request's instructions: the interpreter's start, Django's setup and the
warm-up are in both runs and cancel out. Only the worker's own instructions count, not what
PostgreSQL, Redis or the kernel execute for it.

Cases: the bare create and its two wrapped forms (``plain``, ``plain_engine``, ``plain_peer``),
the stack's floor (``fixed``), a replay of ``plain_engine`` from the worker's table
(``engine_replay``), and the real order: ``order_create`` (``POST /api/v1/orders/``, a new key
each) and ``order_replay`` (keys placed during the warm-up, sent again: HITs from the worker's
table). Cases run two at a time (one per core); a run takes about 4 minutes per order case and
2 per plain case on a 2-core guest. It needs valgrind (Debian package ``valgrind``).
"""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.cpu_per_request import _environ as plain_environ
from bench.http_load import (
    PROJECT_ROOT,
    Options,
    base_env,
    db_helper,
    flush_redis,
    merged_env,
    order_body,
    recreate_database,
)

DB_NAME = "bench_instructions"
WARMUP = 30
PATHS = {
    "plain": "/api/bench/plain/",
    "plain_engine": "/api/bench/plain-engine/",
    "plain_peer": "/api/bench/plain-peer/",
    "fixed": "/api/bench/fixed/",
    "engine_replay": "/api/bench/plain-engine/",
    "order_create": "/api/v1/orders/",
    "order_replay": "/api/v1/orders/",
}
REPLAYS = ("engine_replay", "order_replay")
EXPECTED = {
    "plain_engine": "MISS",
    "engine_replay": "HIT",
    "order_create": "MISS",
    "order_replay": "HIT",
}
RATIOS = (
    ("plain_engine", "plain"),
    ("plain_peer", "plain"),
    ("order_create", "plain"),
    ("order_replay", "plain"),
    ("engine_replay", "fixed"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--cases", default=",".join(PATHS), help="comma-separated")
    parser.add_argument("--requests", type=int, default=30, help="N: the runs send N and 3 N")
    parser.add_argument("--db-name", default=DB_NAME, help="created, then dropped at the end")
    parser.add_argument(
        "--redis-url", default="redis://127.0.0.1:6379/14", help="a Redis database to empty"
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("bench.instructions needs valgrind: apt-get install -y valgrind")
    cases = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(cases) - set(PATHS))
    if unknown:
        raise SystemExit(f"unknown cases: {', '.join(unknown)} (known: {', '.join(PATHS)})")
    opts = Options(db_name=args.db_name, redis_url=args.redis_url)
    try:
        env, tenant = prepare(opts)
        runs = [(case, n) for case in cases for n in (args.requests, 3 * args.requests)]
        with ThreadPoolExecutor(max_workers=2) as pool:
            totals = list(pool.map(lambda run: _count(env, tenant, *run), runs))
    finally:
        recreate_database(opts.db_name, drop_only=True)
        flush_redis(opts.redis_url)
    per_request = {
        case: (totals[2 * i + 1] - totals[2 * i]) / (2 * args.requests)
        for i, case in enumerate(cases)
    }
    report(per_request, args.requests)


def prepare(opts: Options) -> tuple[dict[str, str], dict[str, Any]]:
    """A fresh database (migrated, one tenant with its dishes and diner sessions) and an empty
    Redis database; the measured processes' environment and the tenant."""
    recreate_database(opts.db_name)
    flush_redis(opts.redis_url)
    seeded = db_helper(opts, "seed", {"tenants": 1, "dishes": 3}, {"REDIS_URL": opts.redis_url})
    env = merged_env(base_env(opts), {"REDIS_URL": opts.redis_url, "PYTHONHASHSEED": "0"})
    return env, seeded["tenants"][0]


def report(per_request: dict[str, float], n: int) -> None:
    print(f"instructions per request (callgrind; runs of {WARMUP} + {n} and {WARMUP} + {3 * n})")
    for case, count in per_request.items():
        print(f"{case:<14}{count:>14,.0f}")
    for num, den in RATIOS:
        if num in per_request and den in per_request:
            print(f"{num} / {den}: {per_request[num] / per_request[den]:.2f}")


def run_measured(
    env: dict[str, str],
    tenant: dict[str, Any],
    case: str,
    n: int,
    *,
    under: Sequence[str] = (),
    timeout: int = 3600,
) -> subprocess.CompletedProcess[str]:
    """The measured process of ``case`` (warm-up plus ``n`` requests), run ``under`` a
    command such as valgrind's (nothing: directly)."""
    return subprocess.run(
        [*under, sys.executable, "-m", "bench.instructions", "_child"],
        cwd=PROJECT_ROOT,
        env=env,
        input=json.dumps({"case": case, "n": n, "tenant": tenant}),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _count(env: dict[str, str], tenant: dict[str, Any], case: str, n: int) -> int:
    """Instructions of one run of ``case``'s measured process under callgrind."""
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as tmp:
        out = Path(tmp) / "callgrind.out"
        callgrind = ("valgrind", "--tool=callgrind", f"--callgrind-out-file={out}")
        child = run_measured(env, tenant, case, n, under=callgrind)
    if child.returncode != 0:
        raise SystemExit(f"{case}: the measured process failed:\n{child.stderr[-4000:]}")
    collected = re.search(r"Collected : (\d+)", child.stderr)
    if collected is None:
        raise SystemExit(f"{case}: callgrind reported no count:\n{child.stderr[-2000:]}")
    return int(collected.group(1))


# --- the measured process -----------------------------------------------------------------------


def _child() -> None:
    import django

    django.setup()
    from django.core.handlers.wsgi import WSGIHandler

    payload = json.loads(sys.stdin.read())
    case, n, tenant = payload["case"], payload["n"], payload["tenant"]
    app = WSGIHandler()
    prefix = uuid.uuid4().hex
    warm = [f"{prefix}-w{i}" for i in range(WARMUP)]
    if case in REPLAYS:
        keys = [warm[i % WARMUP] for i in range(n)]  # placed during the warm-up: every one a HIT
    else:
        keys = [f"{prefix}-{i}" for i in range(n)]
    answers = [_send(app, case, key, tenant) for key in warm + keys]
    expected = EXPECTED.get(case)
    wrong = [
        (status, result)
        for status, result in answers[WARMUP:]
        if not status.startswith("201") or result != (expected or result)
    ]
    if wrong:
        raise SystemExit(f"{case}: {len(wrong)} answers were not as expected: {wrong[0]}")


def _send(app: Any, case: str, key: str, tenant: dict[str, Any]) -> tuple[str, str]:
    """One request of ``case`` with ``key``; its status and ``X-Idempotent-Result``."""
    seen: list[tuple[str, str]] = []

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        seen.append((status, dict(headers).get("X-Idempotent-Result", "-")))

    environ = plain_environ(PATHS[case], key)
    if case.startswith("order_"):
        body = order_body(key, tenant["dishes"][0])
        environ |= {
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.input": io.BytesIO(body),
            "HTTP_AUTHORIZATION": f"Bearer {tenant['tokens'][0]}",
        }
    b"".join(app(environ, start_response))
    return seen[0]


if __name__ == "__main__":
    if sys.argv[1:] == ["_child"]:
        _child()
    else:
        main()

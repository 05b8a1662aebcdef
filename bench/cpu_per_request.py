"""CPU per request in one process: what `@idempotent` and drf-idempotency add to a bare create.

    .venv/bin/python -m bench.cpu_per_request [--requests 2000] [--rounds 3]

No server and no load generator: a child process calls the project's WSGI application in a
loop, with the settings of ``bench/http_load.py``'s servers (DEBUG off, persistent database
connection, one Redis node), on a throwaway database, and counts the process's own CPU time
per request (``time.process_time``): the Python work each case does, the part a profile of the
engine can change. Beside it, what the two servers spent on the same requests: the CPU time of
the process's PostgreSQL backend (from ``/proc``, so only when PostgreSQL runs on this
machine; ``-`` otherwise) and of the Redis server (its ``INFO cpu``, the whole server: run it
on a Redis nothing else uses). Left out: HTTP, and PostgreSQL's background writers, which the
load test includes. On a machine where the worker, PostgreSQL and Redis share the cores, the
three together are what bounds a case's throughput.

Cases are interleaved round by round; every request of a create case sends a new
``Idempotency-Key``, and ``engine_replay`` sends the keys of a ``plain_engine`` batch again
(every answer a HIT from the process's table); ``engine_replay_redis`` does the same with that
table emptied before each request (every answer a HIT from Redis). Last, it prints what one
round trip costs the client alone: a one-line Lua script by ``EVALSHA`` (redis-py) and a
``SELECT 1``.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from statistics import median
from typing import Any

from bench.http_load import (
    PROJECT_ROOT,
    Options,
    base_env,
    flush_redis,
    merged_env,
    recreate_database,
)

DB_NAME = "bench_cpu"
CASES = {
    "plain": "/api/bench/plain/",
    "plain_engine": "/api/bench/plain-engine/",
    "plain_peer": "/api/bench/plain-peer/",
    "fixed": "/api/bench/fixed/",
    # the plain_engine requests sent again: every answer a replay (HIT) from the process's table
    "engine_replay": "/api/bench/plain-engine/",
    # the same, with the process's table emptied before each request: every answer a HIT from
    # Redis, as when a retry lands on another worker than its first attempt
    "engine_replay_redis": "/api/bench/plain-engine/",
}
REPLAYS = ("engine_replay", "engine_replay_redis")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--requests", type=int, default=2000, help="per case and round")
    parser.add_argument("--rounds", type=int, default=3)
    add_child_arguments(parser, db_name=DB_NAME)
    args = parser.parse_args()
    opts = child_options(args)
    payload = {"requests": args.requests, "rounds": args.rounds}
    report(measure_in_child("bench.cpu_per_request", opts, payload), args.requests)


def add_child_arguments(parser: argparse.ArgumentParser, *, db_name: str) -> None:
    """``--db-name`` and ``--redis-url``: where a :func:`measure_in_child` run may write."""
    parser.add_argument("--db-name", default=db_name, help="created, then dropped at the end")
    parser.add_argument(
        "--redis-url", default=Options.redis_url, help="a Redis database this run may empty"
    )


def child_options(args: argparse.Namespace) -> Options:
    return Options(db_name=args.db_name, redis_url=args.redis_url)


def measure_in_child(module: str, opts: Options, payload: dict[str, Any]) -> Any:
    """Run ``python -m <module> _child`` with the servers' settings on a fresh database and an
    empty Redis database (both emptied again afterwards), ``payload`` as JSON on its stdin;
    what it printed last, as JSON."""
    recreate_database(opts.db_name)
    flush_redis(opts.redis_url)
    try:
        child = subprocess.run(
            [sys.executable, "-m", module, "_child"],
            cwd=PROJECT_ROOT,
            env=merged_env(base_env(opts), {"REDIS_URL": opts.redis_url}),
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            timeout=3600,
        )
    finally:
        recreate_database(opts.db_name, drop_only=True)
        flush_redis(opts.redis_url)
    if child.returncode != 0:
        raise SystemExit(f"the measuring process failed:\n{child.stderr[-4000:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def timed_gets(client: Any, path: str, headers: dict[str, str], n: int) -> dict[str, Any]:
    """``n`` GETs of ``path`` through Django's test ``client``: the last answer's status,
    bytes and statements sent, and the process's CPU µs per request."""
    from django.db import connection

    statements: list[str] = []

    def counted(execute: Any, sql: str, *args: Any) -> Any:
        statements.append(sql)
        return execute(sql, *args)

    started = time.process_time()
    for _ in range(n):
        statements.clear()
        with connection.execute_wrapper(counted):
            answer = client.get(path, **headers)
    cpu = (time.process_time() - started) / n * 1e6
    return {
        "status": answer.status_code,
        "bytes": len(answer.content),
        "queries": len(statements),
        "cpu": cpu,
    }


PARTS = ("worker", "database", "redis")  # who spent the CPU: see the module docstring
Parts = dict[str, float]  # part -> CPU µs per request; NaN: not measurable here


def report(measured: dict[str, Any], requests: int) -> None:
    trips = {name: measured.pop(name)[0] for name in ("rt_evalsha", "rt_select_1")}
    rounds: dict[str, list[Parts]] = measured
    per_case = {case: _medians(values) for case, values in rounds.items()}
    print(f"CPU µs per request, one process (median of {len(rounds['plain'])} rounds", end="")
    print(f" of {requests} requests)")
    print(f"{'case':<20}{'worker':>8}{'database':>10}{'redis':>8}{'total':>8}  worker rounds")
    for case, parts in per_case.items():
        spread = ", ".join(f"{r['worker']:.0f}" for r in rounds[case])
        cells = "".join(f"{_cell(parts[p]):>{w}}" for p, w in zip(PARTS, (8, 10, 8), strict=True))
        print(f"{case:<20}{cells}{_cell(_total(parts)):>8}  {spread}")
    engine = _added(per_case["plain_engine"], per_case["plain"])
    peer = _added(per_case["plain_peer"], per_case["plain"])
    print(f"added by @idempotent:      {_parts_line(engine)}")
    print(f"added by drf-idempotency:  {_parts_line(peer)}")
    workers = _ratio(engine["worker"], peer["worker"])
    print(f"@idempotent / drf-idempotency added CPU: {workers:.2f} (worker), ", end="")
    print(f"{_ratio(_total(engine), _total(peer)):.2f} (all three)")
    worker = {case: parts["worker"] for case, parts in per_case.items()}
    print(f"engine_replay / fixed CPU: {worker['engine_replay'] / worker['fixed']:.2f}")
    redis_replay = worker["engine_replay_redis"] / worker["engine_replay"]
    print(f"engine_replay_redis / engine_replay CPU: {redis_replay:.2f}")
    print(f"plain / plain_engine CPU:  {worker['plain'] / worker['plain_engine']:.2f}", end="")
    totals = _ratio(_total(per_case["plain"]), _total(per_case["plain_engine"]))
    print(f" (worker), {totals:.2f} (all three)")
    print(f"one round trip, client CPU: Redis EVALSHA {trips['rt_evalsha']:.0f} µs", end="")
    print(f", PostgreSQL SELECT 1 {trips['rt_select_1']:.0f} µs")


def _medians(rounds: list[Parts]) -> Parts:
    """Each part's median over the rounds; NaN where a round could not measure it."""
    values = {part: [r[part] for r in rounds] for part in PARTS}
    return {p: math.nan if any(map(math.isnan, v)) else median(v) for p, v in values.items()}


def _added(case: Parts, base: Parts) -> Parts:
    return {part: case[part] - base[part] for part in PARTS}


def _total(parts: Parts) -> float:
    return sum(parts[part] for part in PARTS)


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


def _cell(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.0f}"


def _parts_line(parts: Parts) -> str:
    cells = ", ".join(f"{part} {_cell(parts[part])}" for part in PARTS)
    return f"{cells}, total {_cell(_total(parts))} µs"


# --- the measuring process --------------------------------------------------------------------


def _child() -> None:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    payload = json.loads(sys.stdin.read())
    app = wsgi_application()
    rounds: dict[str, list[Parts]] = {case: [] for case in CASES}
    for case, path in CASES.items():  # warm every code path and connection first
        _cpu_per_request(app, path, 200, replay=case)
    for _ in range(payload["rounds"]):
        for case, path in CASES.items():
            rounds[case].append(_cpu_per_request(app, path, payload["requests"], replay=case))
    print(json.dumps(rounds | _round_trips(payload["requests"])))


def _round_trips(n: int) -> dict[str, list[float]]:
    """Client CPU µs of one Redis ``EVALSHA`` and one PostgreSQL ``SELECT 1``."""
    import redis
    from django.conf import settings
    from django.db import connection

    client = redis.Redis.from_url(settings.REDIS_URL)
    script = client.register_script("return redis.call('HMGET', KEYS[1], 'st', 'res')")
    cursor = connection.cursor()
    calls = {
        "rt_evalsha": lambda: script(keys=["bench:cpu"]),
        "rt_select_1": lambda: cursor.execute("SELECT 1") or cursor.fetchone(),
    }
    spent = {}
    for name, call in calls.items():
        call()
        started = time.process_time()
        for _ in range(n):
            call()
        spent[name] = [(time.process_time() - started) / n * 1e6]
    cursor.close()
    client.close()
    return spent


def wsgi_application() -> Any:
    from django.core.handlers.wsgi import WSGIHandler

    return WSGIHandler()


def _cpu_per_request(app: Any, path: str, n: int, *, replay: str) -> Parts:
    """CPU µs per request over ``n`` requests of case ``replay``, by who spent it (``PARTS``);
    each must answer 201 (for the cases in ``REPLAYS``: the keys are sent once first, untimed,
    and every timed answer must be a HIT; ``engine_replay_redis`` empties the process's table
    before each)."""
    from idempotency.stores.nodes import local_cache

    prefix = uuid.uuid4().hex
    is_replay = replay in REPLAYS
    if is_replay:
        send_all(app, path, prefix, n)
    before_each = local_cache().clear if replay == "engine_replay_redis" else None
    backend = _database_backend()
    started = (time.process_time(), _database_seconds(backend), _redis_seconds())
    answers = send_all(app, path, prefix, n, before_each=before_each)
    ended = (time.process_time(), _database_seconds(backend), _redis_seconds())
    if backend != _database_backend():  # the connection was replaced: its CPU is unknown
        ended = (ended[0], math.nan, ended[2])
    if before_each is not None and len(local_cache()) > 1:
        # each HIT is remembered: more than the last one means the table was not emptied
        raise RuntimeError(f"{path}: replays were served from the process's table, not Redis")
    check_answers(path, answers, replay=is_replay)
    return {
        part: (after - before) / n * 1e6
        for part, before, after in zip(PARTS, started, ended, strict=True)
    }


def _database_backend() -> int:
    """The pid of this process's PostgreSQL backend."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def _database_seconds(pid: int) -> float:
    """User + system CPU seconds of the backend ``pid`` (``/proc/<pid>/stat``); NaN when
    PostgreSQL does not run on this machine."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _redis_seconds() -> float:
    """User + system CPU seconds of the whole Redis server (``INFO cpu``)."""
    import redis
    from django.conf import settings

    with redis.Redis.from_url(settings.REDIS_URL) as client:
        info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def check_answers(path: str, answers: list[tuple[str, str]], *, replay: bool = False) -> None:
    """Every answer a 201 (with ``replay``: a 201 HIT), else ``RuntimeError``: a measurement of
    refusals or errors would be a measurement of another path."""
    refused = [a for a in answers if not a[0].startswith("201") or (replay and a[1] != "HIT")]
    if refused:
        raise RuntimeError(f"{path}: {len(refused)} answers were not as expected: {refused[0]}")


def send_all(
    app: Any, path: str, prefix: str, n: int, *, before_each: Callable[[], None] | None = None
) -> list[tuple[str, str]]:
    """Send keys ``<prefix>-0`` … ``<prefix>-<n-1>`` (calling ``before_each`` before each);
    each answer's status and result header."""
    answers: list[tuple[str, str]] = []

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        answers.append((status, dict(headers).get("X-Idempotent-Result", "-")))

    for i in range(n):
        if before_each is not None:
            before_each()
        assert b"".join(app(_environ(path, f"{prefix}-{i}"), start_response))
    return answers


def _environ(path: str, key: str) -> dict[str, Any]:
    body = json.dumps({"name": "bench", "quantity": 1, "note": key}).encode()
    return {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": path,
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "80",
        "HTTP_HOST": "127.0.0.1",
        "REMOTE_ADDR": "127.0.0.1",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_IDEMPOTENCY_KEY": key,
        "wsgi.input": io.BytesIO(body),
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
    }


if __name__ == "__main__":
    if sys.argv[1:] == ["_child"]:
        _child()
    else:
        main()

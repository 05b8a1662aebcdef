"""Where the worker's CPU of one ``plain_engine`` request goes, step by step.

    .venv/bin/python -m bench.engine_steps [--requests 2000] [--rounds 3]

``bench/cpu_per_request.py`` says how much CPU ``@idempotent`` adds to the bare create; this
says where, inside the worker. A child process with the servers' settings (as there: DEBUG
off, one Redis node, a throwaway database) calls the WSGI application with new keys, and each
step of the engine is timed by the thread CPU it spends (``time.thread_time``): the Redis
claim, the database claim (whose query carries the transaction's ``BEGIN``), the view, the
record (whose statement carries the ``COMMIT``) and the Redis finish, then the rest of the
engine and the rest of the request. Before the engine proper runs, the decorator prepares the
request: its key, fingerprint and policy. Steps that send a statement or a command count the
client's whole round trip: building it, the system calls, reading the answer.

Each step is timed by wrapping the function the engine calls for it, for the measured
requests only; a run in which a step did not run exactly once per request is refused, so a
wrapper on a function the engine no longer calls cannot report a silent zero. The wrappers read
the thread's CPU clock fourteen times per request (about 0.6 µs each on the machine of
``docs/benchmarks.md``), which lands mostly in the rest of the engine.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from statistics import median
from typing import Any

from bench.cpu_per_request import (
    CASES,
    add_child_arguments,
    check_answers,
    child_options,
    measure_in_child,
    send_all,
    wsgi_application,
)

DB_NAME = "bench_engine_steps"
PATH = CASES["plain_engine"]
ENGINE = "engine, in all"
REQUEST = "whole request"


@dataclass(frozen=True)
class Step:
    """A step of the engine: its label, the function that runs it (module or class, and the
    attribute the engine looks up when it calls it), and whether it runs inside
    ``engine.process`` (the ENGINE step) or before it."""

    label: str
    owner: str
    attribute: str
    in_process: bool = True


# in the order a first execution runs them; ENGINE encloses every step but the first
STEPS = (
    Step("key, fingerprint, policy (prepare)", "idempotency.web.drf", "prepare", False),
    Step("Redis claim", "idempotency.stores.redis_store:RedisIdempotencyStore", "claim"),
    Step(
        "database claim and record read, with the BEGIN",
        "idempotency.stores.database_claim",
        "claim_and_read",
    ),
    Step("the view", "idempotency.web.drf", "_run_view"),
    Step("record, with the COMMIT", "idempotency.stores.database", "insert_record"),
    Step("Redis finish", "idempotency.stores.redis_store:RedisIdempotencyStore", "finish"),
    Step(ENGINE, "idempotency.core.engine", "process", False),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--requests", type=int, default=2000, help="per round")
    parser.add_argument("--rounds", type=int, default=3)
    add_child_arguments(parser, db_name=DB_NAME)
    args = parser.parse_args()
    payload = {"requests": args.requests, "rounds": args.rounds}
    report(measure_in_child("bench.engine_steps", child_options(args), payload), args.requests)


def report(rounds: list[dict[str, float]], requests: int) -> None:
    """Each step's median over the rounds, and what the engine and the request spend besides."""
    per_step = {label: median(r[label] for r in rounds) for label in rounds[0]}
    inner = sum(per_step[s.label] for s in STEPS if s.in_process)
    before = sum(per_step[s.label] for s in STEPS if not s.in_process)
    rows = [(s.label, per_step[s.label]) for s in STEPS if s.label != ENGINE]
    rows += [
        ("the rest of the engine", per_step[ENGINE] - inner),
        ("the rest of the request (middleware, DRF)", per_step[REQUEST] - before),
        (REQUEST, per_step[REQUEST]),
    ]
    print(f"worker CPU µs per plain_engine request (median of {len(rounds)} rounds of", end="")
    print(f" {requests} requests; each step once per request)")
    for label, value in rows:
        share = 100 * value / per_step[REQUEST]
        print(f"{label:<44}{value:>8.0f}{share:>7.1f} %")


# --- the measuring process --------------------------------------------------------------------


def _child() -> None:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    payload = json.loads(sys.stdin.read())
    app = wsgi_application()
    check_answers(PATH, send_all(app, PATH, uuid.uuid4().hex, 200))  # warm every path
    rounds = [measure_round(app, payload["requests"]) for _ in range(payload["rounds"])]
    print(json.dumps(rounds))


def measure_round(app: Any, n: int) -> dict[str, float]:
    """Thread CPU µs per request of each step and of the whole request, over ``n`` requests
    with new keys; ``RuntimeError`` if a step did not run once per request."""
    spent = {step.label: 0.0 for step in STEPS}
    calls = dict.fromkeys(spent, 0)
    with timed_steps(spent, calls):
        started = time.thread_time()
        answers = send_all(app, PATH, uuid.uuid4().hex, n)
        whole = time.thread_time() - started
    check_answers(PATH, answers)
    check_calls(calls, n)
    return {label: seconds / n * 1e6 for label, seconds in spent.items()} | {
        REQUEST: whole / n * 1e6
    }


def check_calls(calls: dict[str, int], n: int) -> None:
    """Every step ran once per request: a step that ran otherwise measures something else, and
    one that never ran is wrapped where the engine no longer calls it."""
    wrong = {label: count for label, count in calls.items() if count != n}
    if wrong:
        raise RuntimeError(f"steps that did not run once per request in {n}: {wrong}")


@contextmanager
def timed_steps(spent: dict[str, float], calls: dict[str, int]) -> Iterator[None]:
    """Wrap every step's function so that its thread CPU adds to ``spent`` and its calls to
    ``calls``; the originals are put back on leaving."""
    originals = []
    for step in STEPS:
        owner = _owner(step.owner)
        original = getattr(owner, step.attribute)
        originals.append((owner, step.attribute, original))
        setattr(owner, step.attribute, _timed(original, step.label, spent, calls))
    try:
        yield
    finally:
        for owner, attribute, original in reversed(originals):
            setattr(owner, attribute, original)


def _timed(
    function: Callable[..., Any], label: str, spent: dict[str, float], calls: dict[str, int]
) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent[label] += time.thread_time() - started
            calls[label] += 1

    return timed


def _owner(path: str) -> Any:
    """``module`` or ``module:Class``, imported."""
    module, _, cls = path.partition(":")
    imported = importlib.import_module(module)
    return getattr(imported, cls) if cls else imported


if __name__ == "__main__":
    if sys.argv[1:] == ["_child"]:
        _child()
    else:
        main()

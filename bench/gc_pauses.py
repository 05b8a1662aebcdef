"""What Python's garbage collector costs a worker, with and without freezing start-up's objects.

    .venv/bin/python -m bench.gc_pauses [--requests 6000]

``config/gunicorn.py``'s ``post_worker_init`` calls ``gc.freeze()`` once a worker has loaded
the app. This runs two child processes, one after the other, with the settings of
``bench/cpu_per_request.py`` (the WSGI application called in a loop on a throwaway database,
no HTTP): one calls that hook after building the application, the other does not. Each sends
``--requests`` requests to the bare create and to the bare create behind ``@idempotent``
(after 300 untimed ones each; every answer must be a 201), and times every collection with
``gc.callbacks`` (the process's CPU time). It prints, per mode and case: the objects the
collector tracks (what a full collection walks), collections per generation, the GC's CPU per
request, and the longest single collection per generation, which is the pause the request it
lands on pays.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from functools import partial
from types import SimpleNamespace
from typing import Any, TypeVar

from bench.cpu_per_request import add_child_arguments, child_options, measure_in_child

DB_NAME = "bench_gc"
CASES = {"plain": "/api/bench/plain/", "plain_engine": "/api/bench/plain-engine/"}
MODES = ("as loaded", "frozen by post_worker_init")
WARMUP = 300

T = TypeVar("T")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--requests", type=int, default=6000, help="per case and mode")
    add_child_arguments(parser, db_name=DB_NAME)
    args = parser.parse_args()
    opts = child_options(args)
    measured = {
        mode: measure_in_child(
            "bench.gc_pauses", opts, {"requests": args.requests, "freeze": mode != MODES[0]}
        )
        for mode in MODES
    }
    report(measured, args.requests)


def report(measured: dict[str, Any], requests: int) -> None:
    print(f"garbage collection per worker, {requests} requests per case after {WARMUP}")
    print(
        f"{'mode':<28}{'case':<14}{'tracked':>9}{'gen0':>6}{'gen1':>6}{'gen2':>6}"
        f"{'GC µs/req':>11}{'longest gen0/1/2 ms':>22}"
    )
    for mode, cases in measured.items():
        for case, m in cases.items():
            longest = "/".join(f"{m['longest_ms'][g]:.1f}" for g in "012")
            counts = "".join(f"{m['collections'][g]:>6}" for g in "012")
            print(
                f"{mode:<28}{case:<14}{m['tracked']:>9}{counts}"
                f"{m['gc_us_per_request']:>11.1f}{longest:>22}"
            )
    before, after = (measured[mode]["plain_engine"] for mode in MODES)
    print(
        "plain_engine, longest full collection: "
        f"{before['longest_ms']['2']:.1f} ms as loaded, {after['longest_ms']['2']:.1f} ms frozen"
    )


# --- the measuring process --------------------------------------------------------------------


def _child() -> None:
    import django

    django.setup()
    from django.core.management import call_command

    from bench.cpu_per_request import check_answers, send_all, wsgi_application
    from config.gunicorn import post_worker_init

    call_command("migrate", verbosity=0, interactive=False)
    payload = json.loads(sys.stdin.read())
    app = wsgi_application()
    if payload["freeze"]:
        post_worker_init(SimpleNamespace(pid=0, log=SimpleNamespace(info=lambda *args: None)))
    for path in CASES.values():
        check_answers(path, send_all(app, path, uuid.uuid4().hex, WARMUP))
    requests = payload["requests"]
    result = {}
    for case, path in CASES.items():
        send = partial(send_all, app, path, uuid.uuid4().hex, requests)
        answers, result[case] = _collections_during(send, requests)
        result[case]["tracked"] = len(gc.get_objects())  # what a full collection walks
        check_answers(path, answers)
    print(json.dumps(result))


def _collections_during(run: Callable[[], T], requests: int) -> tuple[T, dict[str, Any]]:
    """Run ``run`` and time each collection it triggers (process CPU), by generation; what
    ``run`` returned, and the timings."""
    spent: Counter[str] = Counter()
    counted: Counter[str] = Counter()
    longest: Counter[str] = Counter()
    started: list[float] = []

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(time.process_time())
            return
        took = time.process_time() - started.pop()
        generation = str(info["generation"])
        spent[generation] += took
        counted[generation] += 1
        longest[generation] = max(longest[generation], took)

    gc.callbacks.append(timed)
    try:
        returned = run()
    finally:
        gc.callbacks.remove(timed)
    return returned, {
        "collections": {g: counted[g] for g in "012"},
        "gc_us_per_request": sum(spent.values()) / requests * 1e6,
        "longest_ms": {g: longest[g] * 1e3 for g in "012"},
    }


if __name__ == "__main__":
    if sys.argv[1:] == ["_child"]:
        _child()
    else:
        main()

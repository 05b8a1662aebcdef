"""What config/gunicorn.py's hooks do in a worker."""

from __future__ import annotations

import gc
from types import SimpleNamespace

from config.gunicorn import post_worker_init


def test_a_worker_freezes_what_loading_the_app_made_then_says_it_is_ready():
    # given a worker that has loaded the app, nothing frozen yet
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    alive = len(gc.get_objects())
    logged: list[str] = []
    worker = SimpleNamespace(
        pid=4321, log=SimpleNamespace(info=lambda message, *args: logged.append(message % args))
    )
    try:
        # when gunicorn calls the hook
        post_worker_init(worker)
        # then the objects alive are out of the collector's generations (a full collection
        # no longer walks them), and the worker says it can answer
        assert gc.get_freeze_count() >= alive
        assert len(gc.get_objects()) < alive // 10
        assert logged == ["Worker ready (pid: 4321)"]
    finally:
        gc.unfreeze()

"""A real Celery worker process for the tests that are about the worker (RECIPES §4).

``celery_worker`` starts ``celery -A config worker --pool=prefork -c 2`` on pytest's test
database (``APP_DB_NAME``) and the suite's broker, consuming a queue of its own (so two test
runs sharing a Redis never take each other's messages); this process publishes to the same
queue while the fixture lives. It is module-scoped so that no other module's test runs while it
consumes: their after-commit messages must not be acted on behind their backs.

Broker settings are shortened for the worker: a 10 s visibility timeout with a restore sweep
every second (kombu 5.7 throttles it to every 100 s otherwise), and saga retries after 0.2-1 s.
The longest task here (a refund held 3 s) stays well under the timeout even on a busy machine;
a task running past it would be restored and run a second time beside the first (RECIPES §4).
Waits are for committed rows (``wait_for``), bounded by ``tests/support/waiting.py``'s
generous deadline.

Tests using it need ``@pytest.mark.django_db(transaction=True)``: the worker sees only
committed rows.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import redis
from django.conf import settings

from tests.support.waiting import wait_until

PROJECT_ROOT = Path(__file__).resolve().parents[2]
TEST_ENV = {
    "CELERY_VISIBILITY_TIMEOUT": "10",
    "CELERY_RESTORE_INTERVAL": "1",
    "SAGA_RETRY_BASE_SECONDS": "0.2",
    "SAGA_RETRY_MAX_SECONDS": "1",
    "OFFBOARDING_DRAIN_SECONDS": "0",
    "PYTHONUNBUFFERED": "1",
}


class CeleryWorker:
    """One worker process group; ``kill()`` is a SIGKILL of the whole group, ``start()`` a
    fresh worker (a new node name, as a replacement host would have)."""

    def __init__(
        self,
        *,
        db_name: str,
        queue: str,
        log_dir: Path,
        extra_args: tuple[str, ...] = (),
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.db_name = db_name
        self.queue = queue
        self.log_dir = log_dir
        self.extra_args = extra_args  # e.g. --beat: the worker also runs the beat schedule
        self.extra_env = extra_env or {}
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = log_dir / "worker-0.log"
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        self.log_path = self.log_dir / f"worker-{self.starts}.log"
        env = {
            **os.environ,
            **TEST_ENV,
            "APP_DB_NAME": self.db_name,
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            "CELERY_QUEUE": self.queue,
            **self.extra_env,
        }
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable, "-m", "celery", "-A", "config", "worker",
                    "--pool=prefork", "-c", "2", "-Q", self.queue,
                    "--without-gossip", "--without-mingle", "--without-heartbeat",
                    "-n", f"test-{uuid4().hex[:6]}@%h", "--loglevel=INFO", *self.extra_args,
                ],
                cwd=PROJECT_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        process = self.process

        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"Celery worker exited:\n{self.log()[-4000:]}")
            return " ready." in self.log()

        wait_until(ready, what="Celery worker ready", detail=lambda: self.log()[-4000:])

    def kill(self) -> None:
        """SIGKILL the worker and its pool children at once: no clean-up, no acks."""
        assert self.process is not None
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def busy(self) -> bool:
        """Whether a message of this worker's queue waits in the broker or is held unacknowledged
        (running, or due later). Tasks are acknowledged after they return (``task_acks_late``),
        and a task publishes its follow-ups before it returns, so "not busy" leaves no gap in
        which a follow-up is on its way."""
        broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        try:
            if broker.llen(self.queue):
                return True
            held = broker.hvals("unacked")  # kombu's Redis transport: [message, exchange, key]
        finally:
            broker.close()
        return any(json.loads(entry)[2] == self.queue for entry in held)


@contextmanager
def running_worker(log_dir: Path, **options: Any) -> Iterator[CeleryWorker]:
    """A started worker on a queue of its own, which this process publishes to meanwhile."""
    from config.celery import app

    queue = f"test-{uuid4().hex[:8]}"
    before = (app.conf.task_default_queue, app.conf.task_always_eager)
    app.conf.task_default_queue, app.conf.task_always_eager = queue, False
    worker = CeleryWorker(
        db_name=settings.DATABASES["default"]["NAME"], queue=queue, log_dir=log_dir, **options
    )
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()
        app.conf.task_default_queue, app.conf.task_always_eager = before
        broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        broker.delete(queue)
        broker.close()


@pytest.fixture(scope="module")
def celery_worker(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CeleryWorker]:
    with running_worker(tmp_path_factory.mktemp("celery")) as worker:
        yield worker


@pytest.fixture(autouse=True)
def celery_worker_idle_after_the_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that used the module's worker ends when the worker has nothing left to do: a
    follow-up task still running would otherwise hold row locks while the database is flushed
    for the next test (a deadlock, seen under CPU load)."""
    yield
    if "celery_worker" in request.fixturenames:
        worker = request.getfixturevalue("celery_worker")
        if worker.process is not None and worker.process.poll() is None:
            wait_until(lambda: not worker.busy(), what="the Celery worker to go idle")


def wait_for(condition: Callable[[], object], *, worker: CeleryWorker) -> None:
    """Wait until ``condition`` (reading committed rows) holds; fail with the worker log."""
    wait_until(condition, what="worker outcome", detail=lambda: worker.log()[-6000:])

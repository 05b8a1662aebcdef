"""The in-process fallback for audit events the durable paths could not take.

Events land here only when neither the Redis stream nor the database took them at once: a
first execution counted in database-only mode (batched so the hot path stays one transaction),
or anything while Redis and the database both fail. A daemon thread writes what is queued
every ``AUDIT_FLUSH_SECONDS``; whatever a SIGKILLed process held here is lost, which is why
this is the last resort, not the path.

The queue is bounded (``AUDIT_QUEUE_MAX`` events) and a batch the database refuses is retried
at most ``AUDIT_WRITE_ATTEMPTS`` times: past either bound events are dropped and counted in
``idempotency_audits_dropped_total`` (reason ``queue_full`` or ``write_failed``), instead of
memory growing without limit while the database is away.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass

from django.db import close_old_connections, connection

from idempotency import metrics
from idempotency.audit.events import AuditEvent
from idempotency.audit.storage import save_events
from idempotency.core.conf import a_test_run, engine_setting

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Queued:
    event: AuditEvent
    attempts: int = 0
    # the database the event happened in (its name when it was queued): see _database_now
    database: str = ""


def _database_now() -> str:
    """The name of the database the engine writes to now. Django's test runner destroys its
    test database and then gives the connection the real database's name back before the
    process exits: events queued during the last test would be written into the real database
    (a host's ``manage.py test`` added its counts to the development database's), so an event
    is written only while the database it happened in is the one configured."""
    return str(connection.settings_dict.get("NAME") or "")


class PendingAudits:
    """A bounded queue plus one writer thread per process (restarted after a fork)."""

    def __init__(self) -> None:
        self._queue: queue.Queue[_Queued] = queue.Queue()
        self._lock = threading.Lock()
        self._pid: int | None = None
        # Set when an event is queued. The writer waits on it rather than taking the first
        # event off the queue: an event it held through its gathering interval was in no
        # queue the exit's flush could see, and a process that exited then (a command, a
        # worker's restart) lost it.
        self._queued = threading.Event()
        # Held while a batch is written: the exit's flush waits for the writer's write to end
        # instead of leaving it to be cut off with the interpreter.
        self._writing = threading.Lock()

    def record(self, event: AuditEvent) -> bool:
        """Queue ``event``; False (and counted as dropped) when the queue is full.

        In a test run no writer thread starts, whatever ``AUDIT_IN_BACKGROUND`` says: the
        runner drops its test database at the end while the settings still name it, and a
        writer waking then (to write the last test's counts) connected to a database being
        dropped and logged the failure with a traceback. A test run's events wait for
        ``drain_audits()``; ``reset_engine()`` and the runner's end drop them."""
        if not self._put(_Queued(event, database=_database_now())):
            return False
        if engine_setting("AUDIT_IN_BACKGROUND") and not a_test_run():
            self._ensure_thread()
        return True

    @property
    def runs_in_this_process(self) -> bool:
        return self._pid == os.getpid()

    def __len__(self) -> int:
        return self._queue.qsize()

    def discard(self) -> None:
        """Drop whatever is queued (tests start from a clean slate)."""
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return

    def flush(self) -> int:
        """Write everything queued now, in the caller's thread; returns how many events.

        On a database error the batch goes back on the queue (each event at most
        ``AUDIT_WRITE_ATTEMPTS`` times) and the error is raised."""
        batch: list[_Queued] = []
        while True:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        database = _database_now()
        gone = [q for q in batch if q.database != database]
        if gone:
            # their database was a test run's, destroyed since: nothing to write them into
            logger.debug("%d idempotency audit events of a database gone, dropped", len(gone))
            batch = [q for q in batch if q.database == database]
        if batch:
            try:
                save_events(q.event for q in batch)
            except Exception:
                self._requeue(batch)
                raise
        return len(batch)

    def _put(self, item: _Queued) -> bool:
        if self._queue.qsize() >= engine_setting("AUDIT_QUEUE_MAX"):
            metrics.audits_dropped.labels(reason="queue_full").inc()
            return False
        self._queue.put(item)
        self._queued.set()
        return True

    def _requeue(self, batch: list[_Queued]) -> None:
        limit = engine_setting("AUDIT_WRITE_ATTEMPTS")
        for item in batch:
            if item.attempts + 1 >= limit:
                metrics.audits_dropped.labels(reason="write_failed").inc()
            else:
                self._put(_Queued(item.event, item.attempts + 1, item.database))

    def _ensure_thread(self) -> None:
        if self.runs_in_this_process:
            return
        with self._lock:
            if self.runs_in_this_process:
                return
            self._pid = os.getpid()
            self._writing = threading.Lock()  # a forked child's copy may be held by no thread
            threading.Thread(target=self._run, name="idempotency-audit", daemon=True).start()

    def _run(self) -> None:
        """Sleep until an event arrives, let a batch gather for a moment, write it. Events
        stay in the queue until the write takes them, so the exit's flush finds them."""
        interval = engine_setting("AUDIT_FLUSH_SECONDS")
        while True:
            self._queued.wait()
            self._queued.clear()  # an event queued from here on wakes the next round
            time.sleep(interval)
            try:
                close_old_connections()
                with self._writing:
                    self.flush()
            except Exception:  # survive a database blip; the batch was re-queued (bounded)
                logger.exception("could not write idempotency audit events")
            finally:
                connection.close()

    def flush_at_exit(self) -> None:
        """Write what is queued, after the writer's write under way (if any) has ended."""
        with self._writing:
            self.flush()


pending = PendingAudits()


@atexit.register
def _flush_at_exit() -> None:
    """A worker shutting down writes what its background writer had not written yet."""
    if not pending.runs_in_this_process:
        return
    try:
        pending.flush_at_exit()
    except Exception:  # interpreter shutdown: nothing more to do than say so
        logger.exception("audit events lost at exit")

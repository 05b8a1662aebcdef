"""Duplicate-hit audits, written off the request path.

A replay must stay cheap (0 database queries from the cache), so an audit is put on an
in-process queue and a daemon thread writes queued audits in batches every
``AUDIT_FLUSH_SECONDS``. The price: audits queued in a process that is SIGKILLed within that
second are lost. They are a review aid, not the idempotency truth (which is the record table).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime

from django.db import close_old_connections, connection
from django.utils import timezone

from idempotency.core.conf import engine_setting
from idempotency.models import DuplicateAudit

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AuditEvent:
    tenant_key: str
    endpoint: str
    key: str
    outcome: str
    source: str
    principal: str
    request_meta: dict
    differing_fields: list[str] = field(default_factory=list)
    resource_ref: str = ""
    at: datetime = field(default_factory=timezone.now)

    def to_model(self) -> DuplicateAudit:
        return DuplicateAudit(
            tenant_key=self.tenant_key,
            endpoint=self.endpoint[:255],
            key=self.key[:255],
            outcome=self.outcome,
            source=self.source,
            principal=self.principal[:255],
            request_meta=self.request_meta,
            differing_fields=self.differing_fields,
            resource_ref=self.resource_ref[:100],
            at=self.at,
        )


class AuditWriter:
    """A queue plus one writer thread per process (restarted after a fork)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[AuditEvent] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pid: int | None = None

    def record(self, event: AuditEvent) -> None:
        self._queue.put(event)
        if engine_setting("AUDIT_IN_BACKGROUND"):
            self._ensure_thread()

    @property
    def runs_in_this_process(self) -> bool:
        return self._pid == os.getpid()

    def discard(self) -> None:
        """Drop whatever is queued (tests start from a clean slate)."""
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return

    def flush(self, first: AuditEvent | None = None) -> int:
        """Write everything queued now, in the caller's thread; returns how many rows.

        On a database error the batch goes back on the queue for the next flush."""
        batch: list[AuditEvent] = [first] if first else []
        while True:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        if batch:
            try:
                DuplicateAudit.objects.bulk_create([e.to_model() for e in batch])
            except Exception:
                for event in batch:
                    self._queue.put(event)
                raise
        return len(batch)

    def _ensure_thread(self) -> None:
        if self.runs_in_this_process:
            return
        with self._lock:
            if self.runs_in_this_process:
                return
            self._pid = os.getpid()
            threading.Thread(target=self._run, name="idempotency-audit", daemon=True).start()

    def _run(self) -> None:
        """Sleep until an audit arrives, let a batch gather for a moment, write it."""
        interval = engine_setting("AUDIT_FLUSH_SECONDS")
        while True:
            first = self._queue.get()
            time.sleep(interval)
            try:
                close_old_connections()
                self.flush(first)
            except Exception:  # survive a database blip; the batch was re-queued
                logger.exception("could not write duplicate-hit audits")
            finally:
                connection.close()


writer = AuditWriter()


@atexit.register
def _flush_at_exit() -> None:
    """A worker shutting down writes what its background writer had not written yet."""
    if not writer.runs_in_this_process:
        return
    try:
        writer.flush()
    except Exception:  # interpreter shutdown: nothing more to do than say so
        logger.exception("audits lost at exit")

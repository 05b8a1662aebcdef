"""Audit events of the engine: what each request's outcome was, kept where staff can review it.

- :mod:`.events`: the event and its forms (audit row, counter key, stream entry);
- :mod:`.storage`: the database write, audit rows and hourly ``OutcomeCount`` rows together.

How an event travels (the request's transaction, the Redis stream and its drain, or the
bounded in-process fallback) is decided in ``idempotency.stores.audit_stream``, which knows the
Redis nodes (``idempotency.stores.audit_pending``: the fallback).
"""

from idempotency.audit.events import MISS, OUTCOMES, AuditEvent
from idempotency.audit.storage import save_events

__all__ = ["MISS", "OUTCOMES", "AuditEvent", "save_events"]

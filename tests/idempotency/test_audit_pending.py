"""``idempotency.stores.audit_pending``: what the in-process fallback holds reaches the database
when its process exits normally (a management command, a worker's restart)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db.models import Sum

from idempotency.models import OutcomeCount
from tests.support.django_child import run_with_environment

pytestmark = pytest.mark.django_db(transaction=True)

# The child queues one first-execution count, waits until the background writer is gathering
# its batch (its interval's sleep, held here for as long as the process lives), and exits.
WRITER_GATHERING_THEN_EXIT = """
import sys, threading
import django
django.setup()
from idempotency.audit import AuditEvent
from idempotency.stores import audit_pending

gathering = threading.Event()

def gather(seconds):
    gathering.set()
    threading.Event().wait()

audit_pending.time = type("Clock", (), {"sleep": staticmethod(gather)})
audit_pending.pending.record(
    AuditEvent(
        tenant_key="exiting",
        endpoint="POST api/v1/orders/",
        key="",
        outcome="MISS",
        source="database",
        principal="diner:1",
    )
)
if not gathering.wait(120):
    sys.exit("the background writer never started gathering a batch")
"""


def test_an_event_the_writer_is_gathering_is_written_when_the_process_exits():
    """The writer took the first event off the queue and slept its interval with it in hand:
    the exit's flush found the queue empty, so a command (the payment reconciliation's first
    executions) or a worker stopping within a second of an event lost it, though the exit's
    flush is there to write what the writer had not."""
    child = run_with_environment(
        WRITER_GATHERING_THEN_EXIT, {"APP_DB_NAME": settings.DATABASES["default"]["NAME"]}
    )
    assert child.returncode == 0, child.stderr[-2000:]
    written = OutcomeCount.objects.filter(tenant_key="exiting", outcome="MISS").aggregate(
        n=Sum("count")
    )["n"]
    assert written == 1

"""Dead letters: messages whose last retry failed, kept for staff to requeue or discard.

The admin (``ordering/admin.py``) and ``manage.py dead_letters`` call the service functions
here; both moves are conditional updates on the letter's state, so a double click (or two staff
members at once) requeues a letter once.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.db.models.functions import Now

from ordering.background import dispatch
from ordering.models import Compensation, DeadLetter, DepartedPayment, Order, OutboxEvent
from tenants.models import Tenant

logger = logging.getLogger(__name__)
# a discard's note, as the admin's Discard form takes it (and a provider conflict's)
MAX_NOTE_CHARS = 2000


class DeadLetterNotOpen(Exception):
    """The letter does not exist, or was already requeued or discarded."""


def record_dead_letter(
    *,
    key: str,
    task: str,
    payload: dict[str, Any],
    error: str,
    attempts: int,
    tenant: Tenant | None = None,
    order: Order | None = None,
) -> DeadLetter | None:
    """Write a dead letter; None if one is already open for ``key`` (a duplicate delivery of
    the failing message must not file it twice)."""
    try:
        with transaction.atomic():
            return DeadLetter.objects.create(
                key=key,
                task=task,
                payload=payload,
                error=error,
                attempts=attempts,
                tenant=tenant,
                order=order,
            )
    except IntegrityError:
        return None


def requeue_dead_letter(*, dead_letter_id: int, actor: str) -> DeadLetter:
    """Send the letter's message again, with fresh retries for the step that failed.

    The message is sent after commit, so it never runs before the step was reset. An outbox
    event's letter also puts its event back among those sent and not consumed: should this
    send be lost (the broker down now, or Redis dropping its queue later), the outbox sweeper
    sends it again, as it does any event's, instead of the order staying CANCELLING with its
    letter closed."""
    with transaction.atomic():
        _close(dead_letter_id, state=DeadLetter.State.REQUEUED, actor=actor)
        letter = DeadLetter.objects.get(pk=dead_letter_id)
        Compensation.all_tenants.filter(
            compensation_id=letter.key, status=Compensation.Status.FAILED
        ).update(
            # updated now: a refund's resend sweep waits on it before sending it again
            status=Compensation.Status.PENDING,
            attempts=0,
            last_error="",
            updated_at=Now(),
        )
        # the platform's refund of a capture after its restaurant left (no Compensation row)
        DepartedPayment.objects.filter(
            pk=DepartedPayment.pk_of_letter(letter.key), refund=DepartedPayment.Refund.FAILED
        ).update(
            refund=DepartedPayment.Refund.PENDING,
            refund_attempts=0,
            refund_last_error="",
            updated_at=Now(),
        )
        args = list(letter.payload.get("args", []))
        kwargs = dict(letter.payload.get("kwargs", {}))
        if letter.task == dispatch.HANDLE_OUTBOX_EVENT and args:
            # not consumed any more, sent now: the outbox sweeper's redelivery takes it from
            # here (ordering/background/outbox.py)
            OutboxEvent.all_tenants.filter(pk=args[0]).update(
                consumed_at=None, last_publish_at=Now(), resend_at=OutboxEvent.resend_after(sends=1)
            )
        transaction.on_commit(lambda: _send(letter, args, kwargs))
    logger.info("dead letter %s requeued by %s", dead_letter_id, actor)
    return letter


def _send(letter: DeadLetter, args: list[Any], kwargs: dict[str, Any]) -> None:
    try:
        dispatch.enqueue(letter.task, *args, **kwargs)
    except Exception as exc:  # the broker is down: the requeue itself has committed
        logger.warning(
            "dead letter %s requeued but its message not sent now (%s)%s",
            letter.pk,
            exc,
            "; the outbox sweeper sends it again"
            if letter.task == dispatch.HANDLE_OUTBOX_EVENT
            else "",
        )


def discard_dead_letter(*, dead_letter_id: int, actor: str, note: str) -> DeadLetter:
    """Close the letter without running it again (staff handled it some other way); the order
    it names stays where it is.

    ``note`` says what was done instead (1 to :data:`MAX_NOTE_CHARS` characters, else
    :class:`ValueError` and nothing closed): the step never runs again, so a refund that failed
    is never sent, and a letter closed with no note left nobody able to tell whether the
    diner's money ever went back."""
    if not note.strip() or len(note) > MAX_NOTE_CHARS:
        raise ValueError(f"a note of 1-{MAX_NOTE_CHARS} characters is required")
    with transaction.atomic():
        _close(dead_letter_id, state=DeadLetter.State.DISCARDED, actor=actor, note=note.strip())
        letter = DeadLetter.objects.get(pk=dead_letter_id)
        # a departed restaurant's payment: staff settled its capture, so it says so and, no
        # longer waiting for staff, goes with the retention purge
        DepartedPayment.objects.filter(
            pk=DepartedPayment.pk_of_letter(letter.key), refund=DepartedPayment.Refund.FAILED
        ).update(
            refund=DepartedPayment.Refund.SETTLED,
            settled_by=actor[:150],
            settlement_note=note.strip(),
            updated_at=Now(),
        )
    logger.info("dead letter %s discarded by %s", dead_letter_id, actor)
    return letter


def open_dead_letters(*, tenant: Tenant | None = None) -> QuerySet[DeadLetter]:
    letters = DeadLetter.objects.filter(state=DeadLetter.State.OPEN)
    return letters.filter(tenant=tenant) if tenant is not None else letters


def is_flagged(order: Order) -> bool:
    """Whether the order waits for staff: an open dead letter names it."""
    return open_dead_letters().filter(order=order).exists()


def _close(dead_letter_id: int, *, state: str, actor: str, note: str = "") -> None:
    fields: dict[str, Any] = {"state": state, "resolved_at": Now(), "resolved_by": actor[:150]}
    if note:
        fields["note"] = note
    if not DeadLetter.objects.filter(pk=dead_letter_id, state=DeadLetter.State.OPEN).update(
        **fields
    ):
        raise DeadLetterNotOpen(f"dead letter {dead_letter_id} is not open")

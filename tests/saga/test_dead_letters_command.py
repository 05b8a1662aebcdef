"""``manage.py dead_letters``: what it tells the operator who lists, requeues or discards."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ordering.background.saga import SagaOutcome, run_cancel_saga
from ordering.models import Compensation, DeadLetter, EventType, OutboxEvent
from ordering.services.lifecycle import cancel_order
from ordering.simulation import plan_fault
from tests.payments.helpers import paid_order


def dead_letters(*args: str) -> str:
    out = StringIO()
    call_command("dead_letters", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def letter(tenant, menu, settings) -> DeadLetter:
    """A refund that failed past its retries: one open dead letter."""
    settings.SAGA_MAX_RETRIES = 0
    order, _ = paid_order(tenant, menu["pizza"], quantity=1)
    cancel_order(tenant=tenant, order_id=order.pk, actor="diner")
    event = OutboxEvent.objects.for_tenant(tenant).get(
        order=order, event_type=EventType.CANCEL_REQUESTED
    )
    plan_fault(order=order, step=Compensation.Step.REFUND_PAYMENT, fail_times=1)
    assert run_cancel_saga(event=event) == SagaOutcome.DEAD_LETTERED
    return DeadLetter.objects.get()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "action, done", [("discard", "discarded"), ("requeue", "requeued")], ids=["discard", "requeue"]
)
def test_each_letter_acted_on_is_named_with_what_became_of_it(
    letter: DeadLetter, action: str, done: str
) -> None:
    printed = dead_letters(action, str(letter.pk), "--note", "refunded by hand")

    assert printed == f"{letter.pk}: {done}\n"
    letter.refresh_from_db()
    assert letter.state == done


@pytest.mark.django_db
def test_a_list_with_no_open_letter_says_so() -> None:
    assert dead_letters("list") == "no open dead letters\n"
    assert dead_letters("list", "--all") == "no dead letters\n"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "note",
    [None, "", "   ", "x" * 2001],
    ids=["no-note", "empty", "blank", "too-long"],
)
def test_a_discard_without_a_note_of_what_was_done_instead_closes_nothing(
    letter: DeadLetter, note: str | None
) -> None:
    # given a refund that failed for good; when the operator discards it saying nothing
    args = ["discard", str(letter.pk)] + ([] if note is None else ["--note", note])
    with pytest.raises(CommandError, match="--note"):
        dead_letters(*args)

    # then the letter stays open, the order flagged: the refund was not made, and closing it
    # with no word of what was done instead would leave nobody knowing whether it ever was
    letter.refresh_from_db()
    assert (letter.state, letter.note, letter.resolved_by) == ("open", "", "")

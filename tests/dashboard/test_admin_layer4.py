"""Staff handle dead letters in the admin: requeue once, discard with a note; read-only rows."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from ordering.background.dead_letters import record_dead_letter
from ordering.models import DeadLetter
from tenants.models import Tenant

pytestmark = pytest.mark.django_db
LIST = "/admin/ordering/deadletter/"


@pytest.fixture
def staff(client):
    client.force_login(User.objects.create_superuser("ops", password="pw-123456"))
    return client


def letter(key: str) -> DeadLetter:
    return record_dead_letter(
        key=key, task="ordering.background.tasks.noop", payload={}, error="boom", attempts=4
    )


DISCARDED = {"apply": "1", "note": "refunded by hand at the provider"}


def test_requeue_and_discard_actions(staff, django_capture_on_commit_callbacks):
    a, b = letter("cancel:1:refund"), letter("cancel:2:refund")
    with django_capture_on_commit_callbacks(execute=False):
        staff.post(LIST, {"action": "requeue", "_selected_action": [a.pk]})
        again = staff.post(LIST, {"action": "requeue", "_selected_action": [a.pk]}, follow=True)
    assert b"were not open any more" in again.content
    staff.post(LIST, {"action": "discard", "_selected_action": [b.pk], **DISCARDED})
    a.refresh_from_db()
    b.refresh_from_db()
    assert (a.state, a.resolved_by) == ("requeued", "staff:ops")
    assert (b.state, b.resolved_by) == ("discarded", "staff:ops")


def test_dead_letter_rows_are_read_only(staff):
    row = letter("cancel:3:refund")
    page = staff.get(f"{LIST}{row.pk}/change/")
    assert page.status_code == 200 and b'name="error"' not in page.content
    assert staff.post(f"{LIST}{row.pk}/delete/", {"post": "yes"}).status_code == 403


def test_discarding_asks_for_confirmation_and_a_note_and_keeps_the_note(staff):
    """Discard closed the letters at once, with the note "discarded in the admin": the
    step (a refund, say) never runs again and nothing said what was done instead. The action
    shows the letters and what discarding means, and closes them only with a note, which the
    letter keeps."""
    row = letter("cancel:4:refund_payment")
    action = {"action": "discard", "_selected_action": [row.pk]}

    page = staff.post(LIST, action)
    assert page.status_code == 200
    html = page.content.decode()
    assert "will not run again" in html and "refund_payment" in html and 'name="note"' in html
    blank = staff.post(LIST, {**action, "apply": "1", "note": "  "})
    assert blank.status_code == 200 and b"This field is required." in blank.content
    row.refresh_from_db()
    assert row.state == DeadLetter.State.OPEN

    done = staff.post(LIST, {**action, **DISCARDED})
    assert done.status_code == 302
    row.refresh_from_db()
    assert (row.state, row.note, row.resolved_by) == (
        "discarded",
        DISCARDED["note"],
        "staff:ops",
    )


@pytest.mark.parametrize("action", ["requeue", "discard"])
def test_letters_of_a_restaurant_being_offboarded_are_reported_and_the_others_handled(
    staff, make_tenant, action, django_capture_on_commit_callbacks
):
    """A letter of a restaurant whose offboarding has begun (its rows fenced) among the
    selected answered the 409 page "not saved", though the letters before it were requeued
    (their messages sent) or discarded: staff were told nothing was done. The others are
    handled, that one left open, and both said."""
    staying, leaving = make_tenant("staying"), make_tenant("leaving")
    first = record_dead_letter(
        key="outbox:1:notify", task="t", payload={}, error="boom", attempts=4, tenant=staying
    )
    fenced = record_dead_letter(
        key="outbox:2:notify", task="t", payload={}, error="boom", attempts=4, tenant=leaving
    )
    last = record_dead_letter(
        key="outbox:3:notify", task="t", payload={}, error="boom", attempts=4, tenant=staying
    )
    Tenant.objects.filter(pk=leaving.pk).update(status=Tenant.Status.OFFBOARDING)
    staff.raise_request_exception = False

    with django_capture_on_commit_callbacks(execute=False):
        r = staff.post(
            LIST,
            {
                "action": action,
                "_selected_action": [first.pk, fenced.pk, last.pk],
                **(DISCARDED if action == "discard" else {}),
            },
        )

    assert r.status_code == 302
    states = dict(DeadLetter.objects.values_list("pk", "state"))
    done = "requeued" if action == "requeue" else "discarded"
    assert states == {first.pk: done, fenced.pk: "open", last.pk: done}
    notices = [str(m) for m in staff.get(LIST).context["messages"]]
    assert f"2 dead letter(s) {done}." in notices
    assert f"Left open, their restaurant being offboarded: {fenced.pk}." in notices

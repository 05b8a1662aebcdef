"""Staff end diner sessions in the admin, and its message counts the sessions the action
really ended (red: every selected session not yet marked ended counted, an expired one and one
a sign-out ended meanwhile included)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from tenants.api_keys import issue_api_key
from tenants.diner_sessions import end_session, open_session
from tenants.models import ApiClient, DinerSession, Tenant
from tests.support.concurrency import committed_once_waited_on

pytestmark = pytest.mark.django_db
CHANGELIST = "/admin/tenants/dinersession/"


@pytest.fixture
def staff() -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(User.objects.create_superuser("root", password=None))
    return client


@pytest.fixture
def backend() -> ApiClient:
    tenant = Tenant.objects.create(slug="roma", name="Roma")
    return issue_api_key(tenant=tenant, name="backend", kind=ApiClient.Kind.MERCHANT)[0]


def end_in_the_admin(staff: Client, *sessions: DinerSession) -> list[str]:
    answer = staff.post(
        CHANGELIST,
        {"action": "end", "_selected_action": [str(s.pk) for s in sessions]},
        follow=True,
    )
    assert answer.status_code == 200
    return [str(m) for m in answer.context["messages"]]


def session_of(backend: ApiClient, diner_id: str) -> DinerSession:
    return DinerSession.objects.get(pk=open_session(client=backend, diner_id=diner_id).session_id)


def test_the_count_leaves_out_sessions_already_ended_or_expired(
    staff: Client, backend: ApiClient
) -> None:
    live, ended, expired = (session_of(backend, name) for name in ("ann", "bob", "cy"))
    end_session(session_id=ended.pk)
    DinerSession.objects.filter(pk=expired.pk).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )

    said = end_in_the_admin(staff, live, ended, expired)

    assert said == ["1 session(s) ended. 2 had ended already."]
    assert DinerSession.objects.get(pk=live.pk).revoked_at is not None
    assert DinerSession.objects.get(pk=expired.pk).revoked_at is None


@pytest.mark.django_db(transaction=True)
def test_a_session_signed_out_while_the_action_runs_is_not_counted(
    staff: Client, backend: ApiClient
) -> None:
    session = session_of(backend, "ann")

    with committed_once_waited_on(lambda: end_session(session_id=session.pk)):
        said = end_in_the_admin(staff, session)

    assert said == ["0 session(s) ended. 1 had ended already."]
    assert DinerSession.objects.get(pk=session.pk).revoked_at is not None

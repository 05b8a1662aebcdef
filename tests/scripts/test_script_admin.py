"""The staff workflow for Lua script versions in the Django admin."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from idempotency.models import LuaScriptChange, LuaScriptVersion
from idempotency.scripts.versions import record_contract_pass, shipped_source, upload_version

pytestmark = pytest.mark.django_db
ADD = "/admin/idempotency/luascriptversion/add/"
LIST = "/admin/idempotency/luascriptversion/"
V2 = "-- v2\n" + shipped_source("claim")


@pytest.fixture
def staff(client):
    client.force_login(User.objects.create_superuser("ops", password="pw-123456"))
    return client


def test_upload_through_the_admin_compiles_and_records_the_author(staff):
    r = staff.post(ADD, {"name": "claim", "source": V2, "expected_sha256": ""})
    assert r.status_code == 302
    script = LuaScriptVersion.objects.get()
    assert (script.name, script.version, script.author, script.state) == (
        "claim",
        1,
        "ops",
        "draft",
    )
    assert LuaScriptChange.objects.get().author == "ops"


def test_a_broken_upload_shows_the_redis_error_and_saves_nothing(staff):
    r = staff.post(ADD, {"name": "claim", "source": "return {", "expected_sha256": ""})
    assert r.status_code == 200
    assert b"Redis refused the script" in r.content
    assert LuaScriptVersion.objects.count() == 0


def test_canary_promote_and_rollback_actions(staff):
    script = upload_version(name="claim", source=V2, author="ops")
    # promote is refused before the contract tests passed
    r = staff.post(
        LIST, {"action": "promote_to_stable", "_selected_action": [script.pk]}, follow=True
    )
    assert b"has not passed the contract tests" in r.content
    record_contract_pass(script, author="ci")
    # canary: the intermediate form, then the audience is saved
    form = staff.post(LIST, {"action": "canary", "_selected_action": [script.pk]})
    assert form.status_code == 200 and b"Start canary" in form.content
    staff.post(
        LIST,
        {
            "action": "canary",
            "_selected_action": [script.pk],
            "apply": "1",
            "percent": "5",
            "tenants": "7, 9",
            "regions": "eu-north",
        },
    )
    script.refresh_from_db()
    assert (script.state, script.canary_percent, script.canary_tenants, script.canary_regions) == (
        "canary",
        5,
        ["7", "9"],
        ["eu-north"],
    )
    staff.post(LIST, {"action": "promote_to_stable", "_selected_action": [script.pk]})
    script.refresh_from_db()
    assert script.state == "stable"
    staff.post(LIST, {"action": "roll_back", "_selected_action": [script.pk]})
    script.refresh_from_db()
    assert script.state == "retired"
    assert list(LuaScriptChange.objects.order_by("id").values_list("action", "author")) == [
        ("upload", "ops"),
        ("contract_passed", "ci"),
        ("canary", "ops"),
        ("promote", "ops"),
        ("rollback", "ops"),
    ]


def test_non_staff_cannot_reach_the_scripts(client):
    client.force_login(User.objects.create_user("merchant", password="pw-123456"))
    assert client.get(LIST).status_code == 302

"""The engine's README says what the engine does: its quick start runs, its settings table is
the engine's defaults, its contract table names every error code."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

import idempotency
from idempotency.core.conf import DEFAULTS
from idempotency.core.error_codes import IdempotencyErrorCode
from idempotency.models import DuplicateAudit, IdempotencyRecord, OutcomeCount
from idempotency.tests.testapp import quickstart
from idempotency.tests.testapp.models import Note

README = (Path(idempotency.__file__).parent / "README.md").read_text("utf-8")


def section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_the_settings_table_is_the_engines_defaults():
    rows = re.findall(r"^\| `(\w+)` \| `(.*?)` \|", section("Settings"), flags=re.MULTILINE)
    assert [name for name, _ in rows] == list(DEFAULTS)
    assert {name: default for name, default in rows} == {
        name: repr(value) for name, value in DEFAULTS.items()
    }


def test_the_contract_table_names_every_error_code():
    contract = section("The HTTP contract")
    assert [c.value for c in IdempotencyErrorCode if f"`{c.value}`" not in contract] == []


def test_the_readme_cites_no_document_the_distribution_does_not_ship():
    """The README is the distribution's description: a host reads it without the repository
    the engine came from, whose design notes (``DESIGN``, ``docs/adr``) it cannot open."""
    assert re.findall(r"\bADR \d+|\bDESIGN\b|docs/adr", README) == []


def test_the_quick_start_is_the_module_the_suite_runs():
    settings_block, *code_blocks = python_blocks(section("Quick start"))
    namespace: dict = {}
    exec(settings_block, namespace)
    assert set(namespace["IDEMPOTENCY"]) <= set(DEFAULTS)
    source = Path(quickstart.__file__).read_text("utf-8")
    module = source.split('"""', 2)[2]  # after the module's docstring
    # the blocks, in order, are the whole module: imports included, it runs as pasted
    assert "\n\n\n".join(block.strip() for block in code_blocks) == module.strip()
    [template] = re.findall(r"```html\n(.*?)```", section("Quick start"), flags=re.DOTALL)
    shipped = Path(quickstart.__file__).parent / "templates" / "testapp" / "add_note.html"
    assert template == shipped.read_text("utf-8")


@pytest.fixture
def quickstart_settings(settings):
    settings.IDEMPOTENCY = {
        **settings.IDEMPOTENCY,
        "SCOPE_RESOLVER": "idempotency.tests.testapp.quickstart.scope",
    }


@pytest.fixture
def signed_in(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_user("ada"))
    return client


def test_the_quick_start_drf_view_runs_once_per_key(quickstart_settings, signed_in):
    post = lambda **headers: signed_in.post(  # noqa: E731
        "/quickstart/notes/", {"text": "hi"}, content_type="application/json", **headers
    )
    first = post(HTTP_IDEMPOTENCY_KEY="q-1")
    again = post(HTTP_IDEMPOTENCY_KEY="q-1")
    assert first.status_code == 201 and first["X-Idempotent-Result"] == "MISS"
    assert again["X-Idempotent-Result"] == "HIT" and again.content == first.content
    missing = post()
    assert missing.status_code == 400
    assert json.loads(missing.content)["code"] == "IDEMPOTENCY_KEY_MISSING"
    assert Note.objects.count() == 1


def test_the_quick_start_form_view_applies_a_resubmit_once(quickstart_settings, signed_in):
    page = signed_in.get("/quickstart/add/").content.decode()
    token = re.search(r'name="idempotency_key" value="([^"]+)"', page).group(1)
    form = {"text": "hi", "idempotency_key": token}
    first = signed_in.post("/quickstart/add/", form)
    again = signed_in.post("/quickstart/add/", form)
    assert first.status_code == again.status_code == 302
    assert again["X-Idempotent-Result"] == "HIT" and again["Location"] == first["Location"]
    assert Note.objects.count() == 1
    # a fresh render is a fresh key: a second note on purpose is a second note
    other = re.search(r'value="([^"]+)"', signed_in.get("/quickstart/add/").content.decode())
    assert other.group(1) != token


def test_a_form_resubmit_replays_without_the_messages_framework(
    quickstart_settings, signed_in, settings
):
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if "messages" not in m]
    form = {"text": "hi", "idempotency_key": "form-no-messages"}
    signed_in.post("/quickstart/add/", form)
    again = signed_in.post("/quickstart/add/", form)
    assert again.status_code == 302 and again["X-Idempotent-Result"] == "HIT"


def test_anonymous_callers_never_reach_the_quick_start_drf_view(quickstart_settings, db):
    """The resolver scopes signed-in users only, and a caller it does not scope is not made
    idempotent; the view is behind IsAuthenticated, so an anonymous write (twice, with one
    key) writes nothing (red without it: two notes)."""
    for _ in range(2):
        answer = Client().post(
            "/quickstart/notes/",
            {"text": "hi"},
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY="q-anon",
        )
        assert answer.status_code == 403 and "X-Idempotent-Result" not in answer
        # the form view too: to the login page, nothing written
        form = Client().post("/quickstart/add/", {"text": "hi", "idempotency_key": "f-anon"})
        assert form.status_code == 302 and "login" in form["Location"]
    assert not Note.objects.exists()


def test_the_purge_command_purges_records_and_audits(db, settings):
    """As the README's retention paragraph says: `purge_idempotency_records` runs all three."""
    now = timezone.now()
    IdempotencyRecord.objects.create(
        tenant_key="t-purge",
        scope="user:1|POST|notes/",
        key="k" * 64,
        fingerprint="f" * 64,
        response_status=201,
        created_at=now - timedelta(days=4),
        expires_at=now - timedelta(seconds=1),
    )
    retention = settings.IDEMPOTENCY.get("AUDIT_RETENTION_DAYS", 30)
    DuplicateAudit.objects.create(
        tenant_key="t-purge",
        endpoint="POST notes/",
        key="k" * 64,
        outcome="HIT",
        at=now - timedelta(days=retention + 1),
    )
    out = StringIO()
    call_command("purge_idempotency_records", stdout=out)
    assert out.getvalue().strip() == (
        "purged 1 expired idempotency records, 1 audits and 0 hourly outcome counts"
    )
    assert not IdempotencyRecord.objects.exists() and not DuplicateAudit.objects.exists()


def test_the_purge_command_purges_hourly_outcome_counts_past_the_audit_retention(db, settings):
    """As the README's retention paragraph says: the hourly counts of outcomes go with the
    audits, once their hour ended as long ago (red: the command left every count, a row per
    tenant, endpoint, outcome and hour, for ever)."""
    retention = settings.IDEMPOTENCY.get("AUDIT_RETENTION_DAYS", 30)
    this_hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    for days in (1, retention + 1, 400):
        OutcomeCount.objects.create(
            tenant_key="t-purge", endpoint="POST notes/", outcome="MISS",
            hour=this_hour - timedelta(days=days), count=3,
        )  # fmt: skip
    out = StringIO()
    call_command("purge_idempotency_records", stdout=out)
    assert out.getvalue().strip() == (
        "purged 0 expired idempotency records, 0 audits and 2 hourly outcome counts"
    )
    assert [row.hour for row in OutcomeCount.objects.all()] == [this_hour - timedelta(days=1)]


@pytest.mark.parametrize("size", ["-1", "0", "many"])
def test_the_purge_command_refuses_a_batch_size_that_is_not_a_count(db, size):
    with pytest.raises(CommandError, match="at least 1"):
        call_command("purge_idempotency_records", "--batch-size", size, stdout=StringIO())

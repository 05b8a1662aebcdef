"""Replay, mismatch, scopes and 5xx: the HTTP contract, with Redis and database-only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from idempotency.core import responses
from idempotency.core.error_codes import IdempotencyErrorCode
from idempotency.core.keys import ScopedKey, key_digest
from idempotency.models import IdempotencyRecord
from idempotency.stores import nodes
from idempotency.tests.conftest import caller, post_form, post_note
from idempotency.tests.testapp import executions
from idempotency.tests.testapp.models import Note
from idempotency.tests.testapp.views import behaviour

pytestmark = pytest.mark.django_db


def test_a_retry_replays_the_first_answer_byte_for_byte(engine_mode, client, tenant):
    first = post_note(client, tenant, key="k-1")
    assert first.status_code == 201 and first["X-Idempotent-Result"] == "MISS"
    again = post_note(Client(), tenant, key="k-1")
    assert again.status_code == 201
    assert again["X-Idempotent-Result"] == "HIT" and again["Idempotent-Replayed"] == "true"
    assert again.content == first.content  # the same bytes, "run" nonce included
    assert again["Location"] == first["Location"]
    # and so does a process that has not cached it (another worker): from Redis or the database
    nodes.local_cache().clear()
    elsewhere = post_note(Client(), tenant, key="k-1")
    assert elsewhere["X-Idempotent-Result"] == "HIT" and elsewhere.content == first.content
    assert Note.objects.count() == 1


def test_a_body_over_the_cap_replays_its_resource_afresh_labelled_as_rendered(
    engine_mode, client, tenant, settings
):
    """The first answer (JSON, over the cap) was kept as a pointer to its ``Location``; the
    replay is that resource rendered now, a page here, and says so (red when the first
    answer's ``Content-Type`` is kept: a page labelled JSON)."""
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "MAX_STORED_REPLY_BYTES": 200}
    first = post_note(client, tenant, key="k-big", text="x" * 180)
    assert first.status_code == 201 and first["Content-Type"] == "application/json"
    nodes.local_cache().clear()
    again = post_note(Client(), tenant, key="k-big", text="x" * 180)
    assert again.status_code == 201 and again["X-Idempotent-Result"] == "HIT"
    assert again["Location"] == first["Location"]
    note = Note.objects.get()
    assert again.content == f"note {note.pk}".encode()
    assert again["Content-Type"] == Client().get(first["Location"])["Content-Type"]
    assert again["Content-Type"].startswith("text/html")


def auto_note(tenant: str, text: str, key: str | None = None) -> Any:
    headers = caller(tenant) | ({"HTTP_IDEMPOTENCY_KEY": key} if key else {})
    return Client().post("/notes/auto/", {"text": text}, content_type="application/json", **headers)


def test_a_refusal_under_an_automatic_key_is_not_kept(engine_mode, tenant):
    """A keyless retry is a new attempt: once what refused it changed, it runs (red when the
    refusal is kept: the 409 replayed for the key's minute)."""
    behaviour["refuse"].add("soup")
    first = auto_note(tenant, "soup")
    again = auto_note(tenant, "soup")
    assert [first.status_code, again.status_code] == [409, 409]
    assert [first["X-Idempotent-Result"], again["X-Idempotent-Result"]] == ["MISS", "MISS"]
    behaviour["refuse"].clear()
    placed = auto_note(tenant, "soup")
    assert placed.status_code == 201 and placed["X-Idempotent-Result"] == "MISS"
    double_tap = auto_note(tenant, "soup")
    assert double_tap["X-Idempotent-Result"] == "HIT" and double_tap.content == placed.content
    assert Note.objects.count() == 1


def test_a_refusal_under_an_explicit_key_stands(engine_mode, tenant):
    behaviour["refuse"].add("soup")
    first = auto_note(tenant, "soup", key="k-soup")
    behaviour["refuse"].clear()
    again = auto_note(tenant, "soup", key="k-soup")
    assert (first.status_code, again.status_code) == (409, 409)
    assert again["X-Idempotent-Result"] == "HIT" and again.content == first.content
    assert Note.objects.count() == 0


def test_a_client_key_with_the_automatic_prefix_is_refused(engine_mode, client, tenant):
    """``auto:`` is the prefix of the keys the engine derives for keyless requests: a client
    that sends one gets 400, on the API and in a form, and nothing runs (red when accepted:
    its record got the 60 s automatic window, and the same key after it ran the view again)."""
    api = auto_note(tenant, "soup", key="auto:client-chosen-1")
    assert api.status_code == 400
    assert json.loads(api.content)["code"] == "IDEMPOTENCY_KEY_INVALID"
    form = post_form(client, tenant, token="auto:client-chosen-1")
    assert form.status_code == 303 and form["Location"] == "/notes/form/"
    assert Note.objects.count() == 0 and not IdempotencyRecord.objects.exists()


def test_only_a_derived_key_gets_the_automatic_window(engine_mode, tenant):
    """An explicit key on a view with an automatic-key policy replays for ``TTL_SECONDS``; only
    the key derived for a keyless request lives for the window. Whether a key is automatic is
    said by who made it, never read from its spelling."""
    auto_note(tenant, "soup", key="k-chosen")
    auto_note(tenant, "stew")
    lifetimes = {
        record.key: (record.expires_at - record.created_at).total_seconds()
        for record in IdempotencyRecord.objects.all()
    }
    assert lifetimes.pop(key_digest("k-chosen")) == 72 * 3600
    assert list(lifetimes.values()) == [60]
    spelt_like_one = ScopedKey(
        tenant=tenant, principal="alice", method="POST", route="notes/auto/", key="auto:x"
    )
    assert spelt_like_one.is_automatic is False


@pytest.mark.parametrize(
    ("most", "lease_left_ms", "retry_after"),
    [
        (1, 29_500, "1"),
        (5, 29_500, "5"),
        (5, 1_200, "2"),
        (5, None, "5"),
        (1, 0, "1"),
    ],
)
def test_an_in_progress_answer_asks_for_a_short_wait(settings, most, lease_left_ms, retry_after):
    """At most IN_PROGRESS_RETRY_AFTER_SECONDS, less when the lease ends sooner, never 0 (red
    with the lease left as the hint: 30 s for a request that answers in milliseconds)."""
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "IN_PROGRESS_RETRY_AFTER_SECONDS": most}
    answer = responses.in_progress(lease_left_ms)
    assert answer.status_code == 409 and answer["Retry-After"] == retry_after
    assert json.loads(answer.content)["code"] == "IDEMPOTENCY_REQUEST_IN_PROGRESS"


def test_a_form_resubmit_replays_the_first_redirect(engine_mode, client, tenant):
    first = post_form(client, tenant, token="form-abc")
    assert first.status_code == 302 and first["X-Idempotent-Result"] == "MISS"
    again = post_form(client, tenant, token="form-abc")
    assert again.status_code == 302 and again["X-Idempotent-Result"] == "HIT"
    assert again["Location"] == first["Location"]
    assert Note.objects.count() == 1


def test_a_refused_form_is_not_kept_and_its_correction_runs(engine_mode, client, tenant):
    """A form the view refused (its page again, with the errors) changed nothing: it is not
    kept, so its page, which holds the user's CSRF token, is stored nowhere, and the corrected
    form, sent with the same form token, runs (red: kept, the correction was refused as the
    token reused with other values, and the page stored)."""
    refused = post_form(client, tenant, token="form-fix", text="")
    assert refused.status_code == 400 and b"required" in refused.content
    assert not IdempotencyRecord.objects.exists()
    corrected = post_form(client, tenant, token="form-fix", text="hello")
    assert corrected.status_code == 302 and corrected["X-Idempotent-Result"] == "MISS"
    assert list(Note.objects.values_list("text", flat=True)) == ["hello"]


@pytest.mark.parametrize(
    ("token", "text", "status"),
    [
        ("form-abc", "other", 422),
        ("bad\u00e9token", "hello", 400),
        ("form-new", "a" + "\u0301" * 31, 400),
    ],
    ids=["reused-with-other-values", "malformed-token", "text-with-no-canonical-form"],
)
def test_a_form_the_engine_refuses_goes_back_to_the_form_not_to_json(
    engine_mode, client, tenant, token, text, status
):
    """A person who reused a form's token with other values (back, edit, submit), sent a
    broken one, or typed text the fingerprint cannot put in one form (more than 30 combining
    marks in a row) is sent back to the form's page, not shown the API's problem+json (red:
    the JSON answer, status ``status``)."""
    assert post_form(client, tenant, token="form-abc").status_code == 302
    refused = post_form(client, tenant, token=token, text=text)
    assert refused.status_code == 303 and refused["Location"] == "/notes/form/"
    assert refused["Content-Type"] != "application/problem+json"
    assert Note.objects.count() == 1


@pytest.mark.parametrize(
    ("referer", "back_to"),
    [
        ("http://testserver/notes/?page=2", "http://testserver/notes/?page=2"),
        ("https://elsewhere.example/notes/", "/notes/form/"),
        (None, "/notes/form/"),
    ],
    ids=["this-site", "another-site", "none"],
)
def test_a_refused_form_goes_back_to_the_page_it_was_posted_from(
    engine_mode, client, tenant, referer, back_to
):
    """The form's page is where the browser posted from, when that is this site: a form that
    posts to a POST-only URL was sent back there, to a blank 405 (red: the URL posted to)."""
    assert post_form(client, tenant, token="form-abc").status_code == 302
    extra = {"HTTP_REFERER": referer} if referer else {}
    refused = client.post(
        "/notes/form/",
        {"text": "other", "idempotency_key": "form-abc"},
        **caller(tenant, "alice"),
        **extra,
    )
    assert refused.status_code == 303 and refused["Location"] == back_to


@pytest.mark.parametrize(
    ("action", "referer", "back_to"),
    [
        ("/notes/form/send/", None, "/notes/form/"),
        ("/notes/form/send/", "http://testserver/notes/?page=2", "http://testserver/notes/?page=2"),
        ("/notes/form/send/", "https://elsewhere.example/", "/notes/form/"),
        ("/notes/form/lunch/send/", None, "/notes/form/?board=lunch"),
    ],
    ids=["named-page", "referer-first", "foreign-referer", "callable-page"],
)
def test_a_refused_form_without_a_referer_goes_to_the_page_the_view_names(
    engine_mode, client, tenant, action, referer, back_to
):
    """A form that posts to a POST-only URL, from a browser that sends no ``Referer``, goes
    back to the view's ``form_page`` (a URL name, or a callable given the view's arguments),
    not to a blank 405 at the URL it posted to (red: the URL posted to)."""
    extra = {"HTTP_REFERER": referer} if referer else {}
    body = {"text": "hello", "idempotency_key": "form-send"}
    assert client.post(action, body, **caller(tenant, "alice")).status_code == 302
    refused = client.post(action, {**body, "text": "other"}, **caller(tenant, "alice"), **extra)
    assert refused.status_code == 303 and refused["Location"] == back_to
    assert Note.objects.count() == 1


@pytest.mark.parametrize("token", ["tok_notmine", "tok_" + "a" * 40 + ".sig"])
def test_a_form_carrying_an_api_token_goes_back_to_the_form(engine_mode, client, tenant, token):
    """A form's key shaped like a pre-issued API token is refused as not valid, in words, not
    as the API's JSON (red: 400 problem+json ``IDEMPOTENCY_TOKEN_INVALID``)."""
    refused = post_form(client, tenant, token=token)
    assert refused.status_code == 303 and refused["Location"] == "/notes/form/"
    assert Note.objects.count() == 0


def test_a_reused_key_with_another_payload_is_refused(engine_mode, client, tenant):
    post_note(client, tenant, key="k-2", text="two pizzas")
    reused = post_note(client, tenant, key="k-2", text="three pizzas")
    assert reused.status_code == 422
    assert reused["Content-Type"] == "application/problem+json"
    assert json.loads(reused.content)["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert list(Note.objects.values_list("text", flat=True)) == ["two pizzas"]


@pytest.mark.parametrize("other", ["principal", "tenant"])
def test_another_principal_or_tenant_is_another_key(engine_mode, client, tenant, other):
    mine = post_note(client, tenant, key="shared-key")
    theirs = (
        post_note(client, tenant, key="shared-key", principal="bob")
        if other == "principal"
        else post_note(client, f"{tenant}-other", key="shared-key")
    )
    assert theirs.status_code == 201 and theirs["X-Idempotent-Result"] == "MISS"
    assert theirs.content != mine.content
    assert Note.objects.count() == 2
    # and each one's retry replays its own answer, never the other's
    assert post_note(client, tenant, key="shared-key").content == mine.content


def test_a_long_principal_keeps_each_endpoint_its_own_answers(engine_mode, client, tenant):
    """A scope too long for its column keeps a digest of the whole (red when cut to 255
    characters: every endpoint of this principal had one scope, and the second endpoint's
    request replayed the first's answer without running)."""
    principal = "p" * 250
    headers = caller(tenant, principal) | {"HTTP_IDEMPOTENCY_KEY": "k-long"}
    post = lambda path: client.post(  # noqa: E731
        path, {"text": "hi"}, content_type="application/json", **headers
    )
    first, other = post("/notes/"), post("/notes/wait/")
    assert (first.status_code, other.status_code) == (201, 201)
    assert other["X-Idempotent-Result"] == "MISS" and other.content != first.content
    nodes.local_cache().clear()
    assert post("/notes/").content == first.content
    assert post("/notes/wait/").content == other.content
    assert Note.objects.count() == 2


def test_a_scope_too_long_to_keep_whole_is_bounded_and_its_own():
    def scoped(route: str) -> ScopedKey:
        return ScopedKey(tenant="t", principal="p" * 250, method="POST", route=route, key="k")

    one, two = scoped("notes/"), scoped("notes/wait/")
    assert len(one.scope) == len(two.scope) == 255
    assert one.scope != two.scope and one.scope.startswith("p" * 190)
    assert one.redis_key != two.redis_key and one.business_key != two.business_key
    short = ScopedKey(tenant="t", principal="alice", method="POST", route="notes/", key="k")
    assert short.scope == "alice|POST|notes/"


def test_a_principal_holding_the_scope_separator_is_refused_before_the_view_runs(
    engine_mode, client, tenant, caplog
):
    """A principal ``alice|x`` would make scopes that erasing ``alice`` takes too (its records
    matched as ``alice|…``): refused with 400 and logged as the resolver's error, before the
    view runs (red: 201, the principal's records open to another's erasure)."""
    refused = post_note(client, tenant, key="k-pipe", principal="alice|x")
    assert refused.status_code == 400
    assert json.loads(refused.content)["code"] == "IDEMPOTENCY_PRINCIPAL_INVALID"
    assert "SCOPE_RESOLVER" in caplog.text
    assert Note.objects.count() == 0 and not IdempotencyRecord.objects.exists()


def test_a_tenant_too_long_to_keep_is_refused_before_the_view_runs(engine_mode, client, caplog):
    """A tenant over 64 characters cannot be kept in the records: refused with 400 and logged
    as the resolver's error, before the view runs (red: the view ran, its record failed to
    insert, and every request answered 500)."""
    refused = post_note(client, "t" * 65, key="k-tenant")
    assert refused.status_code == 400
    assert json.loads(refused.content)["code"] == "IDEMPOTENCY_TENANT_INVALID"
    assert "SCOPE_RESOLVER" in caplog.text
    assert Note.objects.count() == 0 and not IdempotencyRecord.objects.exists()
    assert post_note(client, "t" * 64, key="k-tenant").status_code == 201


@pytest.mark.parametrize("suffix", [":eu", "}eu"], ids=["colon", "brace"])
def test_a_tenant_whose_keys_another_tenant_s_would_name_is_refused(
    engine_mode, client, tenant, suffix
):
    """Redis names a tenant's keys by the hash tag ``{t:<tenant>}``, and a hot tenant's
    sub-buckets ``{t:<tenant>:<n>}``: a tenant ``<tenant>:eu`` (or ``<tenant>}eu``) had keys
    that tenant ``<tenant>``'s erasure patterns matched, so forgetting ``<tenant>`` deleted the
    other's claims, replies and tokens, and ``<tenant>:1``'s keys were those of ``<tenant>``'s
    first bucket. Such a tenant is refused before the view runs, and no token is issued to it
    (red: 201, and its keys went with ``forget_tenant_keys(<tenant>)``)."""
    other = f"{tenant}{suffix}"
    refused = post_note(client, other, key="k-tenant")
    assert refused.status_code == 400
    assert json.loads(refused.content)["code"] == "IDEMPOTENCY_TENANT_INVALID"
    assert Note.objects.count() == 0 and not IdempotencyRecord.objects.exists()
    issued = client.post(
        "/api/idempotency-tokens/", {"count": 1}, content_type="application/json", **caller(other)
    )
    assert issued.status_code == 400
    assert json.loads(issued.content)["code"] == "IDEMPOTENCY_TENANT_INVALID"
    assert post_note(client, tenant, key="k-tenant").status_code == 201


def test_a_body_nested_deeper_than_json_can_read_is_a_400_not_a_500(engine_mode, client, tenant):
    """The decorator reads the body before the view runs. DRF's JSON parser answers a body it
    cannot read with 400, but a body nested deeper than Python's recursion limit raised
    ``RecursionError`` out of it, which DRF does not answer: a 500 and a traceback from the
    decorator, for a request a client can send anywhere."""
    body = '{"text": ' + "[" * 100_000 + "]" * 100_000 + "}"
    headers = {**caller(tenant), "HTTP_IDEMPOTENCY_KEY": "k-deep"}
    refused = client.post("/notes/", body, content_type="application/json", **headers)
    assert refused.status_code == 400
    assert Note.objects.count() == 0 and not IdempotencyRecord.objects.exists()


def test_a_5xx_is_not_stored_and_the_retry_executes(engine_mode, client, tenant):
    behaviour["fail_once"] = {"flaky"}
    failed = post_note(client, tenant, key="k-5xx", text="flaky")
    assert failed.status_code == 500 and Note.objects.count() == 0
    retried = post_note(client, tenant, key="k-5xx", text="flaky")
    assert retried.status_code == 201 and retried["X-Idempotent-Result"] == "MISS"
    assert Note.objects.count() == 1


@pytest.mark.parametrize("view", ["drf", "form"])
def test_a_view_that_raises_keeps_nothing_and_the_retry_executes(engine_mode, tenant, view):
    """A view that raises after writing (an exception DRF's handler does not answer, or any a
    form view raises) is answered 500 by Django: its writes are rolled back with the engine's
    transaction, nothing is recorded, and the key is released, so the retry runs it."""
    behaviour["raise_once"] = {"crashy"}

    def send() -> Any:
        client = Client(raise_request_exception=False)
        if view == "drf":
            return post_note(client, tenant, key="k-raise", text="crashy")
        form = {"text": "crashy", "idempotency_key": "form-raise"}
        return client.post("/notes/form/", form, **caller(tenant, "alice"))

    failed = send()
    assert failed.status_code == 500
    assert Note.objects.count() == 0 and not IdempotencyRecord.objects.exists()
    retried = send()
    assert retried.status_code in (201, 302) and retried["X-Idempotent-Result"] == "MISS"
    assert Note.objects.count() == 1 and IdempotencyRecord.objects.count() == 1


@pytest.mark.parametrize(
    ("key", "code"),
    [
        (None, "IDEMPOTENCY_KEY_MISSING"),
        ("", "IDEMPOTENCY_KEY_INVALID"),
        ("x" * 256, None),
        ("k1,k1", None),  # the header sent twice, as a server joins it
    ],
    ids=["missing", "empty", "too-long", "sent-twice"],
)
def test_a_missing_or_malformed_key_is_refused_before_anything_runs(
    engine_mode, client, tenant, key, code
):
    refused = post_note(client, tenant, key=key)
    assert refused.status_code == 400
    assert json.loads(refused.content)["code"] == (code or "IDEMPOTENCY_KEY_INVALID")
    assert Note.objects.count() == 0


def test_a_refusal_is_written_as_drfs_renderer_writes_json():
    """The engine's problem+json has no spaces between tokens and its text as UTF-8, as DRF's
    renderer writes the API's own errors (red with ``json.dumps``'s defaults: one API
    answered in two dialects, a cut detail's ellipsis as ``\\u2026``)."""
    cut = responses.problem(
        409, IdempotencyErrorCode.KEY_REUSED, "é" * (responses.DETAIL_LIMIT + 1)
    )
    detail = "é" * responses.DETAIL_LIMIT + "…"
    assert (
        cut.content
        == f'{{"code":"IDEMPOTENCY_KEY_REUSED","detail":"{detail}","status":409}}'.encode()
    )
    assert cut["Content-Type"] == "application/problem+json"


@pytest.mark.parametrize("first_method", ["get", "head"])
def test_a_get_and_a_head_under_one_key_run_their_handler_once(engine_mode, tenant, first_method):
    """(red: the HEAD, which Django answers with the view's ``get``, was scoped apart from the
    GET: under one key the handler ran twice, a second note written)"""
    client = Client()
    second_method = "head" if first_method == "get" else "get"
    first, second = (
        getattr(client, method)("/notes/export/", HTTP_IDEMPOTENCY_KEY="k", **caller(tenant))
        for method in (first_method, second_method)
    )
    assert first.status_code == second.status_code == 200
    assert first["X-Idempotent-Result"] == "MISS" and second["X-Idempotent-Result"] == "HIT"
    assert executions.runs(tenant, "k") == 1 and Note.objects.count() == 1

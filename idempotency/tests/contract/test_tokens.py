"""Pre-issued tokens: one token, one operation; bound to its tenant and principal."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from idempotency.models import IdempotencyRecord
from idempotency.purge import purge_record
from idempotency.stores import nodes
from idempotency.tests.conftest import caller, idem_keys, post_form, post_note, suite_redis
from idempotency.tests.testapp.models import Note

pytestmark = pytest.mark.django_db


def issue(client: Client, tenant: str, count: int, principal: str = "alice") -> list[str]:
    response = client.post(
        "/api/idempotency-tokens/",
        {"count": count},
        content_type="application/json",
        **caller(tenant, principal),
    )
    assert response.status_code == 201, response.content
    return json.loads(response.content)["tokens"]


def statuses(client: Client, tenant: str, tokens: list[str]) -> list[str]:
    response = client.post(
        "/api/idempotency-tokens/check/",
        {"tokens": tokens},
        content_type="application/json",
        **caller(tenant),
    )
    assert response.status_code == 200, response.content
    return [r["status"] for r in json.loads(response.content)["results"]]


def test_a_token_serves_one_operation_and_its_retries(client, tenant):
    token, spare = issue(client, tenant, 2)
    assert statuses(client, tenant, [token, spare]) == ["unused", "unused"]
    first = post_note(client, tenant, key=token)
    assert first.status_code == 201 and first["X-Idempotent-Result"] == "MISS"
    retry = post_note(Client(), tenant, key=token)
    assert retry["X-Idempotent-Result"] == "HIT" and retry.content == first.content
    assert statuses(client, tenant, [token, spare]) == ["used", "unused"]
    # the same token on another endpoint is refused, and runs nothing there (that endpoint is
    # a form: refused in words, back to the form, not as the API's 409)
    elsewhere = post_form(client, tenant, token=token)
    assert elsewhere.status_code == 303 and elsewhere["Location"] == "/notes/form/"
    assert Note.objects.count() == 1
    elsewhere_by_api = post_note(client, tenant, key=token, text="another note")
    assert elsewhere_by_api.status_code == 422  # its own endpoint: another payload
    assert statuses(client, tenant, [token, spare]) == ["used", "unused"]


def test_a_token_is_refused_for_another_principal_or_tenant_or_when_forged(client, tenant):
    [token] = issue(client, tenant, 1)
    forged = token[:-4] + ("aaaa" if not token.endswith("aaaa") else "bbbb")
    for response in (
        post_note(client, tenant, key=token, principal="bob"),
        post_note(client, f"{tenant}-other", key=token),
        post_note(client, tenant, key=forged),
    ):
        assert response.status_code == 400
        assert json.loads(response.content)["code"] == "IDEMPOTENCY_TOKEN_INVALID"
    assert Note.objects.count() == 0
    assert statuses(client, tenant, [token]) == ["unused"]


def test_without_redis_tokens_cannot_be_issued(settings, client, tenant):
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "REDIS_URL": None}
    response = client.post(
        "/api/idempotency-tokens/", {"count": 1}, content_type="application/json", **caller(tenant)
    )
    assert response.status_code == 503 and response["Retry-After"] == "5"
    assert json.loads(response.content)["code"] == "IDEMPOTENCY_TOKENS_UNAVAILABLE"
    assert idem_keys() == []


def test_a_token_refused_as_unknown_stays_refused_when_redis_is_gone(settings, client, tenant):
    # given a token whose mark Redis lost (restarted without its data): refused as unknown,
    # and the client takes a new token for the operation
    [token] = issue(client, tenant, 1)
    suite_redis().delete(*idem_keys())
    refused = post_note(Client(), tenant, key=token, text="one order")
    assert refused.status_code == 422
    assert json.loads(refused.content)["code"] == "IDEMPOTENCY_TOKEN_UNKNOWN"
    [new] = issue(client, tenant, 1)
    assert post_note(Client(), tenant, key=new, text="one order").status_code == 201
    # when a copy of the refused request, still in flight, arrives while Redis is down (a
    # signed token is then accepted as a plain key), and again once Redis is back
    with_redis = settings.IDEMPOTENCY
    settings.IDEMPOTENCY = {**with_redis, "REDIS_URL": None}
    nodes.reset()
    late = post_note(Client(), tenant, key=token, text="one order")
    settings.IDEMPOTENCY = with_redis
    nodes.reset()
    again = post_note(Client(), tenant, key=token, text="one order")
    # then it is the same refusal, and the operation happened once, with the new token
    for answer in (late, again):
        assert answer.status_code == 422, answer.content
        assert answer.content == refused.content
    assert Note.objects.count() == 1


def test_a_view_that_remembers_its_key_answers_a_token_whose_mark_and_record_are_gone(
    client, tenant
):
    """``recall``: past the retention (the record purged, the token's mark expired with it)
    the view's own memory answers, not 422 "take a new token", which would write again. A
    token it does not remember is still refused as unknown."""
    remembered, unknown = issue(client, tenant, 2)

    def post(token: str) -> Any:
        return Client().post(
            "/notes/remembering/",
            {"text": "hello"},
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY=token,
            **caller(tenant),
        )

    first = post(remembered)
    assert first.status_code == 201, first.content
    for record in IdempotencyRecord.objects.all():
        purge_record(record)
    suite_redis().delete(*idem_keys())  # the marks' TTL, the retention's

    again = post(remembered)
    assert again.status_code == 409, again.content
    assert json.loads(again.content) == {
        "code": "NOTE_ALREADY_WRITTEN",
        "id": json.loads(first.content)["id"],
    }
    refused = post(unknown)
    assert refused.status_code == 422
    assert json.loads(refused.content)["code"] == "IDEMPOTENCY_TOKEN_UNKNOWN"
    assert Note.objects.count() == 1


def test_the_token_api_s_refusals_speak_of_the_caller_in_the_engine_s_words(
    settings, client, tenant
):
    """What the token API tells a host's callers names no one of the product the engine was
    first written for (red: 429 "You (this diner, or this key) may have…", and 403 "Tokens
    are issued to tenant API clients only")."""
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "TOKEN_QUOTA": 100, "TOKEN_MAX_BATCH": 10}
    assert len(issue(client, tenant, 10)) == 10  # a principal's share: the batch, 10
    over = client.post(
        "/api/idempotency-tokens/", {"count": 1}, content_type="application/json", **caller(tenant)
    )
    assert over.status_code == 429
    body = json.loads(over.content)
    assert (body["code"], body["scope"], body["limit"]) == (
        "IDEMPOTENCY_TOKEN_QUOTA_EXCEEDED",
        "principal",
        10,
    )
    assert body["detail"].startswith("You may have at most 10 idempotency tokens outstanding")
    unscoped = client.post(
        "/api/idempotency-tokens/", {"count": 1}, content_type="application/json"
    )
    assert unscoped.status_code == 403
    assert json.loads(unscoped.content)["detail"] == (
        "Idempotency tokens are issued only to callers this site identifies"
    )


def _problem(response: Any) -> tuple[int, str, str]:
    body = json.loads(response.content)
    assert body["status"] == response.status_code and body["detail"], body
    return response.status_code, response["Content-Type"], body["code"]


def test_in_a_host_with_drf_s_own_error_handler_the_token_api_answers_problem_json(
    settings, client, tenant
):
    """Their OpenAPI description promises problem+json with a ``code`` for every refusal; a
    host that keeps DRF's exception handler (this suite's) got DRF's ``{"detail": …}`` as
    ``application/json`` for them, and an HTML page for a body over Django's cap (red: no
    ``code``, no ``status``)."""
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2_000
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "RATE_LIMIT_PER_MINUTE": 1}
    tokens_url, check_url = "/api/idempotency-tokens/", "/api/idempotency-tokens/check/"
    json_body = {"content_type": "application/json", **caller(tenant)}
    problem_json = "application/problem+json"

    refusals = {
        "unscoped": client.post(tokens_url, {"count": 1}, content_type="application/json"),
        "invalid": client.post(check_url, {"tokens": []}, **json_body),
        "malformed": client.post(check_url, "{", **json_body),
        "not json": client.post(check_url, "tokens=a", content_type="text/plain", **caller(tenant)),
        "too large": client.post(check_url, {"tokens": ["a" * 100] * 40}, **json_body),
        "wrong method": client.get(tokens_url, **caller(tenant)),
    }
    assert {name: _problem(r) for name, r in refusals.items()} == {
        "unscoped": (403, problem_json, "PERMISSION_DENIED"),
        "invalid": (400, problem_json, "VALIDATION_ERROR"),
        "malformed": (400, problem_json, "PARSE_ERROR"),
        "not json": (415, problem_json, "UNSUPPORTED_MEDIA_TYPE"),
        "too large": (413, problem_json, "REQUEST_TOO_LARGE"),
        "wrong method": (405, problem_json, "METHOD_NOT_ALLOWED"),
    }
    assert "tokens" in json.loads(refusals["invalid"].content)["errors"]
    # the write rate limit, 1 a minute here: the second issue is refused with its Retry-After
    issue(client, tenant, 1)
    limited = client.post(tokens_url, {"count": 1}, **json_body)
    assert _problem(limited) == (429, problem_json, "RATE_LIMITED")
    assert 0 < int(limited["Retry-After"]) <= 60


@pytest.mark.parametrize("url", ["/api/idempotency-tokens/", "/api/idempotency-tokens/check/"])
def test_a_body_nested_too_deeply_is_a_parse_error_of_the_token_api(client, tenant, url):
    """DRF's JSON parser turns ``ValueError`` into a 400 but lets ``RecursionError`` through:
    a body nested deeper than Python's recursion limit was a 500 and a traceback from both
    token views, where "{" is a problem+json ``PARSE_ERROR``."""
    body = '{"count": ' + "[" * 100_000 + "]" * 100_000 + "}"
    refused = client.post(url, body, content_type="application/json", **caller(tenant))
    assert _problem(refused) == (400, "application/problem+json", "PARSE_ERROR")


def test_callers_held_to_a_share_of_the_quota_stop_there_and_the_others_go_on(
    settings, client, tenant
):
    """The TOKEN_QUOTA_SHARE hook: anyone may open guests, each a principal of its own, so
    guests together stop at their share of the tenant's quota, counted over everyone's tokens,
    while a caller with the whole share goes on to the full quota."""
    settings.IDEMPOTENCY = {
        **settings.IDEMPOTENCY,
        "TOKEN_QUOTA": 100,
        "TOKEN_MAX_BATCH": 30,
        "TOKEN_QUOTA_SHARE": "idempotency.tests.testapp.scope.half_for_guests",
    }
    issue(client, tenant, 30, principal="guest-1")
    issue(client, tenant, 20, principal="guest-2")

    def ask(principal: str, count: int) -> Any:
        return client.post(
            "/api/idempotency-tokens/",
            {"count": count},
            content_type="application/json",
            **caller(tenant, principal),
        )

    over = ask("guest-3", 1)
    assert over.status_code == 429
    body = json.loads(over.content)
    assert (body["code"], body["scope"], body["limit"]) == (
        "IDEMPOTENCY_TOKEN_QUOTA_EXCEEDED",
        "tenant_share",
        50,
    )
    assert int(over["Retry-After"]) >= 1
    assert len(issue(client, tenant, 30, principal="alice")) == 30
    assert len(issue(client, tenant, 20, principal="bob")) == 20
    assert json.loads(ask("carol", 1).content)["scope"] == "tenant"

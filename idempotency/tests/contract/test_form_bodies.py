"""A plain Django view under ``@idempotent_form`` whose body is no form (a page's script posts
JSON, or a form sent as ``text/plain``): Django reads no fields from it, so the body counts
whole, as a DRF body that is no object does. Fingerprinted by its fields alone, every such
body was the same empty form: another create within the automatic key's window, or under the
same key, was replayed the first one's answer and never written."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from idempotency.tests.conftest import caller
from idempotency.tests.testapp.models import Note

JSON_FORM = "/notes/form/json/"


def post_json(client: Client, tenant: str, text: str, **headers: str) -> Any:
    return client.post(
        JSON_FORM,
        json.dumps({"text": text}),
        content_type="application/json",
        **caller(tenant),
        **headers,
    )


@pytest.mark.django_db
def test_two_json_bodies_without_a_key_are_two_creates(engine_mode, client, tenant):
    """(red: the second was replayed the first's answer, HIT {"text": "soup"}, and never
    written)"""
    first = post_json(client, tenant, "soup")
    second = post_json(client, tenant, "bread")

    assert first.status_code == second.status_code == 201
    assert second["X-Idempotent-Result"] == "MISS"
    assert json.loads(second.content)["text"] == "bread"
    assert sorted(Note.objects.values_list("text", flat=True)) == ["bread", "soup"]


@pytest.mark.django_db
def test_the_same_json_body_sent_again_is_replayed(engine_mode, client, tenant):
    first = post_json(client, tenant, "soup")
    again = post_json(client, tenant, "soup")

    assert again["X-Idempotent-Result"] == "HIT" and again.content == first.content
    assert Note.objects.count() == 1


@pytest.mark.django_db
def test_another_json_body_under_the_same_key_is_refused(engine_mode, client, tenant):
    """(red: replayed the first body's answer, 201 HIT)"""
    post_json(client, tenant, "soup", HTTP_IDEMPOTENCY_KEY="json-1")

    other = post_json(client, tenant, "bread", HTTP_IDEMPOTENCY_KEY="json-1")

    assert other.status_code == 303 and other["Location"] == JSON_FORM
    assert list(Note.objects.values_list("text", flat=True)) == ["soup"]

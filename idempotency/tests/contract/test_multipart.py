"""A multipart write (a file, a repeated field) is fingerprinted by everything it sends: an
upload is its name and a SHA-256 of its content, a repeated field all its values."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from idempotency.tests.conftest import caller
from idempotency.tests.testapp.models import Note


def post_attachment(
    client: Client,
    tenant: str,
    *,
    key: str,
    content: bytes | None = None,
    tags: Sequence[str] = ("a",),
) -> Any:
    form: dict[str, Any] = {"text": "receipt", "tags": list(tags)}
    if content is not None:
        form["attachment"] = SimpleUploadedFile("receipt.txt", content)
    return client.post("/notes/attachment/", form, HTTP_IDEMPOTENCY_KEY=key, **caller(tenant))


@pytest.mark.django_db
def test_an_upload_runs_once_and_its_retry_replays(engine_mode, client, tenant):
    """(red: every upload refused, 400 IDEMPOTENCY_PAYLOAD_INVALID "cannot canonicalise
    InMemoryUploadedFile", even with the file among the declared fields)"""
    first = post_attachment(client, tenant, key="up-1", content=b"scan-1")
    again = post_attachment(client, tenant, key="up-1", content=b"scan-1")

    assert first.status_code == 201, first.content
    assert json.loads(first.content)["text"] == "receipt:scan-1"  # the view read it all
    assert again.status_code == 201 and again["X-Idempotent-Result"] == "HIT"
    assert again.content == first.content
    assert Note.objects.count() == 1


@pytest.mark.django_db
def test_another_file_under_the_same_key_is_refused(engine_mode, client, tenant):
    post_attachment(client, tenant, key="up-2", content=b"scan-1")

    other = post_attachment(client, tenant, key="up-2", content=b"scan-2")

    assert other.status_code == 422
    assert json.loads(other.content)["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert Note.objects.count() == 1


@pytest.mark.django_db
def test_another_list_under_the_same_key_is_refused(engine_mode, client, tenant):
    """A repeated field is all its values (the fingerprint is not only the last one)."""
    post_attachment(client, tenant, key="up-3", tags=("a", "b"))

    other = post_attachment(client, tenant, key="up-3", tags=("c", "b"))

    assert other.status_code == 422
    assert json.loads(other.content)["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert Note.objects.count() == 1


@pytest.mark.django_db
def test_a_form_sent_again_with_another_file_is_refused(engine_mode, client, tenant):
    """The page's form sent again (the same one-time key) with another file is the key
    reused with other values (red: the file was not fingerprinted, so it replayed the first
    upload's answer as applied, and the second file was never stored)."""

    def send(content: bytes) -> Any:
        form = {
            "text": "receipt",
            "idempotency_key": "form-upload-1",
            "attachment": SimpleUploadedFile("receipt.txt", content),
        }
        return client.post("/notes/form/upload/", form, **caller(tenant))

    first, again, other = send(b"scan-1"), send(b"scan-1"), send(b"scan-2")

    assert first.status_code == 302 and again["X-Idempotent-Result"] == "HIT"
    assert again["Location"] == first["Location"]
    assert other.status_code == 303 and other["Location"] == "/notes/form/upload/"
    assert list(Note.objects.values_list("text", flat=True)) == ["receipt:scan-1"]

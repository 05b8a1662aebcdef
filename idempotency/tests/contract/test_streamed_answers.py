"""Streamed answers (``StreamingHttpResponse``, ``FileResponse``): the first caller gets its
stream, which the engine never reads; the operation is kept, so a retry runs nothing and
replays the marker of a body not kept, as for a body over the cap."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from idempotency.stores import nodes
from idempotency.tests.conftest import caller
from idempotency.tests.testapp import executions
from idempotency.tests.testapp.models import Note
from idempotency.tests.testapp.views import STREAM_CHUNKS, behaviour

pytestmark = pytest.mark.django_db

CSV = b"".join(STREAM_CHUNKS)


def post(path: str, tenant: str, key: str) -> Any:
    return Client().post(
        path,
        {"text": "export"},
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY=key,
        **caller(tenant),
    )


def post_form(tenant: str, token: str) -> Any:
    return Client().post(
        "/notes/form/stream/", {"text": "export", "idempotency_key": token}, **caller(tenant)
    )


@pytest.mark.parametrize(
    ("send", "status", "omitted"),
    [
        (lambda tenant, key: post("/notes/stream/", tenant, key), 201, "unknown"),
        (lambda tenant, key: post("/notes/file/", tenant, key), 200, str(len(CSV))),
        (post_form, 200, "unknown"),
    ],
    ids=["drf-streaming-response", "drf-file-response", "form-streaming-response"],
)
def test_a_streamed_answer_runs_once_and_its_retry_replays_the_omitted_body_marker(
    engine_mode, tenant, send, status, omitted
):
    """Red before: every attempt answered 500 (the engine read ``.content`` of a stream), the
    note was rolled back, and each retry ran the view again."""
    # given a first request whose answer is streamed
    first = send(tenant, "k-stream")
    assert first.status_code == status and first["X-Idempotent-Result"] == "MISS"
    assert behaviour["chunks_sent"] == 0  # the engine read none of the stream
    assert b"".join(first.streaming_content) == CSV  # the first caller gets all of it
    assert Note.objects.count() == 1  # and the view's write committed
    # when a retry comes, to another process (no local cache)
    nodes.local_cache().clear()
    again = send(tenant, "k-stream")
    # then the view does not run again, and the replay says the body was not kept
    assert again.status_code == status and again["X-Idempotent-Result"] == "HIT"
    assert not again.streaming and again.content == b""
    assert again["Idempotent-Body-Omitted"] == omitted and "Content-Type" not in again
    assert executions.runs(tenant, "k-stream") == 1 and Note.objects.count() == 1

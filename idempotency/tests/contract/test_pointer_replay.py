"""Replays of a body kept as a pointer (over the cap, with a ``Location``): the resource is
rendered afresh when it can be; when it cannot (another site's URL, a path not served here,
the resource deleted), the replay is the marker of a body not kept, under the stored status:
never a 404 or a 500 for an operation that succeeded, nor an error's body under a 2xx."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from idempotency.stores import nodes
from idempotency.tests.conftest import caller
from idempotency.tests.testapp import executions
from idempotency.tests.testapp.models import Note

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def small_cap(settings: Any) -> None:
    """Every answer of these tests is over the cap: kept as a pointer to its ``Location``."""
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "MAX_STORED_REPLY_BYTES": 250}


def post_located(
    tenant: str,
    key: str,
    location: str,
    *,
    url: str = "/notes/located/",
    text: str = "x" * 180,
    **extra: str,
) -> Any:
    """The create answering ``Location: location``, over the cap (``extra``: WSGI variables,
    e.g. ``SCRIPT_NAME``)."""
    body = {"text": text, "location": location}
    return Client().post(
        url,
        body,
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY=key,
        **caller(tenant),
        **extra,
    )


@pytest.mark.parametrize(
    ("location", "delete"),
    [
        # its path names a resource here, /notes/<pk>/: another site's is not ours to render
        ("https://elsewhere.example/notes/{pk}/", False),
        ("/nowhere/{pk}/", False),
        ("/notes/{pk}/strict/", True),
        ("/notes/{pk}/api/", True),
        ("/notes/{pk}/async/", True),
    ],
    ids=[
        "another-site",
        "a-path-not-served",
        "deleted-view-raises",
        "deleted-drf-detail-404",
        "deleted-async-view-raises",
    ],
)
def test_a_pointer_that_cannot_be_rendered_replays_the_omitted_body_marker(
    engine_mode, tenant, location, delete
):
    """Red before: another site's URL rendered this site's page, an unserved path replayed a
    404, a view raising ``DoesNotExist`` a 500, and a DRF detail view its 404 body under the
    201 (a client told its create failed creates again)."""
    # given a create whose answer was kept as a pointer
    first = post_located(tenant, "k-gone", location)
    assert first.status_code == 201 and first["X-Idempotent-Result"] == "MISS"
    if delete:
        Note.objects.all().delete()
    # when its retry arrives at another process (no local cache)
    nodes.local_cache().clear()
    again = post_located(tenant, "k-gone", location)
    # then the stored status and headers, with the marker of a body not kept
    assert again.status_code == 201 and again["X-Idempotent-Result"] == "HIT"
    assert again.content == b"" and "Content-Type" not in again
    assert again["Idempotent-Body-Omitted"] == str(len(first.content))
    assert again["Location"] == first["Location"]
    assert executions.runs(tenant, "k-gone") == 1


def test_a_pointer_to_a_live_resource_replays_it_without_the_marker(engine_mode, tenant):
    first = post_located(tenant, "k-live", "/notes/{pk}/api/")
    nodes.local_cache().clear()
    again = post_located(tenant, "k-live", "/notes/{pk}/api/")
    assert again.status_code == 201 and again["X-Idempotent-Result"] == "HIT"
    assert json.loads(again.content) == {"id": Note.objects.get().pk, "text": "x" * 180}
    assert again["Content-Type"] == "application/json"
    assert "Idempotent-Body-Omitted" not in again and again["Location"] == first["Location"]


def test_a_pointer_to_a_resource_an_async_view_serves_replays_it(engine_mode, tenant):
    """(red: a 500 at every retry, ``'coroutine' object has no attribute 'streaming'``: the
    in-process GET called the ``async def`` view and got its coroutine, never run)"""
    first = post_located(tenant, "k-async", "/notes/{pk}/async/")
    nodes.local_cache().clear()
    again = post_located(tenant, "k-async", "/notes/{pk}/async/")
    assert again.status_code == 201 and again["X-Idempotent-Result"] == "HIT"
    assert again.content == b"note " + b"x" * 180
    assert "Idempotent-Body-Omitted" not in again and again["Location"] == first["Location"]
    assert executions.runs(tenant, "k-async") == 1


@pytest.mark.parametrize(
    "location", ["/app/notes/{pk}/api/", "http://testserver/app/notes/{pk}/api/"]
)
def test_a_pointer_of_a_site_served_under_a_prefix_replays_its_resource(
    engine_mode, tenant, location
):
    """A site mounted under a prefix (``SCRIPT_NAME``, e.g. ``/app``) names its resources with
    it, as ``reverse()`` does; the URLconf knows them without it (red: the URLconf was asked
    for ``/app/notes/<pk>/api/``, and every such replay was the marker of a body not kept)."""

    def post() -> Any:
        return post_located(tenant, "k-prefixed", location, SCRIPT_NAME="/app")

    first = post()
    assert first.status_code == 201 and first["X-Idempotent-Result"] == "MISS"
    nodes.local_cache().clear()
    again = post()
    assert again.status_code == 201 and again["X-Idempotent-Result"] == "HIT"
    assert json.loads(again.content) == {"id": Note.objects.get().pk, "text": "x" * 180}
    assert "Idempotent-Body-Omitted" not in again
    assert executions.runs(tenant, "k-prefixed") == 1


def test_a_pointer_with_a_query_string_replays_the_resource_it_names(engine_mode, tenant):
    """The ``Location``'s query string is part of the resource it names (red: the in-process
    GET kept the create's own query string, ``?part=all``, so the replay rendered the whole
    note where the ``Location`` asked for its head)."""

    def post() -> Any:
        return post_located(
            tenant,
            "k-query",
            "/notes/{pk}/as-asked/?part=head",
            url="/notes/located/?part=all",
            text="abcdefgh" * 25,
        )

    first = post()
    assert first.status_code == 201 and first["X-Idempotent-Result"] == "MISS"
    nodes.local_cache().clear()
    again = post()
    assert again.status_code == 201 and again["X-Idempotent-Result"] == "HIT"
    assert again.content == b"abcde"
    assert executions.runs(tenant, "k-query") == 1

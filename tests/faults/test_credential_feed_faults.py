"""The credential feed when Redis keeps its subscribers but holds or refuses ``PUBLISH``.

A process trusts its cached credential state for ``CREDENTIAL_CACHE_SECONDS`` (60 s) only
while it hears the feed, the pub/sub channel every revocation is announced on; otherwise for
``DINER_SESSION_STATE_CACHE_SECONDS`` (1 s). ``CLIENT PAUSE WRITE`` (what Redis's ``FAILOVER``
does to a master) holds every ``PUBLISH`` past the socket timeout and drops it, while a
subscriber's ``PING`` is still answered: a feed that counted its ``PING`` s as hearing the
channel went on trusting what it had cached, and a diner who signed out was let in by the
other workers for up to a minute (docs/tenancy.md promises 1 s).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from django.conf import settings

from tenants.models import Tenant
from tests.flows.test_credential_feed_live import cache_everywhere, read_all
from tests.support.auth import bearer, diner_token
from tests.support.live_server import live_gunicorn
from tests.support.redis_nodes import RedisNode
from tests.support.waiting import DEADLINE_SECONDS

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BOUND_S = 1.0
PAUSE_MS = 3000


@pytest.fixture
def node() -> Iterator[RedisNode]:
    node = RedisNode().start()
    yield node
    node.remove()


def _answers(responses: list[httpx.Response]) -> set[tuple[int, str | None]]:
    """Each distinct (status, error code) among ``responses``; None for a 200's code."""
    return {(r.status_code, r.json()["code"] if r.status_code != 200 else None) for r in responses}


def test_a_sign_out_during_a_write_pause_is_refused_by_every_worker_within_1s(
    node: RedisNode, tmp_path
) -> None:
    tenant = Tenant.objects.create(slug="feed-pause", name="Feed Pizza")
    headers = bearer(diner_token(tenant, "leaving"))
    env = {"REDIS_URL": node.url, "REDIS_SHARDS": None, "REDIS_CLUSTER_URL": None}
    db_name = settings.DATABASES["default"]["NAME"]
    with live_gunicorn(db_name=db_name, log_dir=tmp_path, env=env) as server:
        # given a diner session every worker holds in its cache while it hears the feed (read
        # again past the short bound: what a worker read before its feed was heard is gone)
        cache_everywhere(server, headers)
        time.sleep(2 * BOUND_S)
        cache_everywhere(server, headers)
        # when Redis holds every write for 3 s, as a failover does, and the diner signs out
        node.client().client_pause(PAUSE_MS, all=False)
        paused_at = time.monotonic()
        ended = httpx.post(
            f"{server.url}/api/v1/diner-sessions/end/",
            headers=headers,
            json={},
            timeout=DEADLINE_SECONDS,
        )
        assert ended.status_code == 204, ended.text
        ended_at = time.monotonic()
        # then 1 s after the sign-out was answered, no worker lets the session in
        time.sleep(max(0.0, ended_at + BOUND_S - time.monotonic()))
        assert _answers(read_all(server, headers)) == {(401, "SESSION_REVOKED")}
        # and once the pause is over, none trusts the state it had cached before it again
        time.sleep(max(0.0, paused_at + PAUSE_MS / 1000 + BOUND_S - time.monotonic()))
        assert _answers(read_all(server, headers)) == {(401, "SESSION_REVOKED")}

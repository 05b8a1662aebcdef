"""Duplicate storms over real HTTP: many identical requests at once, one execution.

The requests go to a live server (a thread per request, each with its own database
connection and Redis client), released together by a barrier while the first execution is
still running. Whatever the interleaving, exactly one executes (MISS), and every other one
replays its answer byte for byte (HIT) or is told to retry (409 with Retry-After).
"""

from __future__ import annotations

import http.client
import json
import threading
from collections import Counter
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

import pytest

from idempotency.tests.testapp import executions
from idempotency.tests.testapp.models import Note
from idempotency.tests.testapp.views import behaviour

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

REQUESTS = 24


@dataclass(frozen=True)
class Answer:
    status: int
    result: str
    retry_after: str | None
    location: str | None
    body: bytes


def storm(
    url: str, path: str, *, body: bytes, headers: dict[str, str], requests: int = REQUESTS
) -> list[Answer]:
    parts = urlsplit(url)
    barrier = threading.Barrier(requests)
    answers: list[Answer | BaseException] = []
    lock = threading.Lock()

    def send() -> None:
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        try:
            connection.connect()
            barrier.wait(30)
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            answer: Answer | BaseException = Answer(
                status=response.status,
                result=response.getheader("X-Idempotent-Result", ""),
                retry_after=response.getheader("Retry-After"),
                location=response.getheader("Location"),
                body=response.read(),
            )
        except BaseException as exc:  # reported by the assertion below
            answer = exc
        finally:
            connection.close()
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=send) for _ in range(requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    failures = [a for a in answers if isinstance(a, BaseException)]
    assert not failures and len(answers) == requests, failures
    return answers  # type: ignore[return-value]


def assert_one_execution(answers: list[Answer]) -> Answer:
    outcomes = Counter(a.result or f"status {a.status}" for a in answers)
    executed = [a for a in answers if a.result == "MISS"]
    assert len(executed) == 1, [(a.status, a.result, a.body[:120]) for a in answers]
    first = executed[0]
    for answer in answers:
        if answer.result == "HIT":
            assert (answer.status, answer.body, answer.location) == (
                first.status,
                first.body,
                first.location,
            )
        elif answer is not first:
            assert answer.status == 409, (outcomes, answer.body[:300])
            assert json.loads(answer.body)["code"] == "IDEMPOTENCY_REQUEST_IN_PROGRESS"
            assert int(answer.retry_after or 0) >= 1
    return first


def test_a_storm_on_the_drf_view_executes_once(engine_mode, live_server, tenant):
    behaviour["delay_seconds"] = 1.0
    answers = storm(
        live_server.url,
        "/notes/",
        body=json.dumps({"text": "storm"}).encode(),
        headers={
            "Content-Type": "application/json",
            "Idempotency-Key": "storm-1",
            "X-Tenant": tenant,
            "X-Principal": "alice",
        },
    )
    first = assert_one_execution(answers)
    assert first.status == 201
    assert Note.objects.count() == 1
    assert executions.runs(tenant, "storm-1") == 1  # the view body too, not only the row
    if engine_mode == "redis":  # the duplicates really arrived while the first one ran
        assert any(a.status == 409 for a in answers)


def test_a_storm_on_the_form_view_executes_once(engine_mode, live_server, tenant):
    behaviour["delay_seconds"] = 0.3
    answers = storm(
        live_server.url,
        "/notes/form/",
        body=urlencode({"text": "storm", "idempotency_key": "form-storm"}).encode(),
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Tenant": tenant,
            "X-Principal": "alice",
        },
    )
    first = assert_one_execution(answers)
    assert first.status == 302
    assert Note.objects.count() == 1
    assert executions.runs(tenant, "form-storm") == 1

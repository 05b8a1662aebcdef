"""Request-size limits (``config/request_limits.py``): a body above ``MAX_REQUEST_BYTES`` is
answered 413 ``REQUEST_TOO_LARGE`` from its headers, before authentication, the idempotency
engine or DRF touch it — in-process, and through gunicorn, where the proof is that the answer
arrives while most of the announced body was never even sent.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from django.conf import settings
from rest_framework.test import APIClient

from idempotency.models import IdempotencyRecord
from ordering.models import Order
from tenants.models import ApiClient
from tests.hardening.conftest import PROBLEM_JSON, World, assert_problem, build_world
from tests.support.development_server import DevelopmentServer, development_server
from tests.support.live_server import LiveServer
from tests.support.waiting import DEADLINE_SECONDS

TEN_MB = 10 * 1024 * 1024
ORDERS = "/api/v1/orders/"


def order_body(dish_id: int, *, size: int) -> bytes:
    """A JSON order of exactly ``size`` bytes (the note pads it)."""
    empty = json.dumps(
        {"items": [{"dish_id": dish_id, "quantity": 1}], "payment_method": "card", "note": ""}
    ).encode()
    assert size >= len(empty)
    return empty[:-2] + b"x" * (size - len(empty)) + b'"}'


def post_raw(world: World, body: bytes, kind: str = "diner", **meta: str) -> object:
    return APIClient(raise_request_exception=False).generic(
        "POST",
        ORDERS,
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=world.auth(kind),
        HTTP_IDEMPOTENCY_KEY="big-order",
        **meta,
    )


def never_authenticated(world: World) -> bool:
    """Authentication with a publishable key stamps its ``last_used_at``: still empty means
    DRF never saw the request (the requests checked this way carry that key)."""
    return ApiClient.objects.get(pk=world.diner_client.pk).last_used_at is None


@pytest.mark.django_db
class TestInProcess:
    def test_a_10_mb_order_is_413_before_drf_reads_it(
        self, world_a: World, nothing_written: Callable[[], None]
    ) -> None:
        response = post_raw(world_a, order_body(world_a.dish.pk, size=TEN_MB), "publishable")

        body = assert_problem(response, 413, "REQUEST_TOO_LARGE")
        assert body["limit"] == settings.MAX_REQUEST_BYTES == 1024 * 1024
        assert response["X-Request-ID"]  # the request-context middleware still wraps it
        assert never_authenticated(world_a)
        assert IdempotencyRecord.objects.count() == 0
        nothing_written()

    def test_a_declared_length_above_the_limit_is_413_whatever_follows(
        self, world_a: World, nothing_written: Callable[[], None]
    ) -> None:
        response = post_raw(world_a, b"{}", "publishable", CONTENT_LENGTH=str(TEN_MB))
        assert_problem(response, 413, "REQUEST_TOO_LARGE")
        assert never_authenticated(world_a)
        nothing_written()

    def test_a_body_of_exactly_the_limit_passes_and_one_byte_more_does_not(
        self, world_a: World
    ) -> None:
        limit = settings.MAX_REQUEST_BYTES
        at_limit = post_raw(world_a, order_body(world_a.dish.pk, size=limit))
        over = post_raw(world_a, order_body(world_a.dish.pk, size=limit + 1))

        # at the limit the body is parsed: the 1 MiB note is then too long for the field
        assert "note" in assert_problem(at_limit, 400, "VALIDATION_ERROR")["errors"]
        assert_problem(over, 413, "REQUEST_TOO_LARGE")

    def test_the_limit_is_the_setting(self, world_a: World, settings: object) -> None:
        settings.MAX_REQUEST_BYTES = 300  # type: ignore[attr-defined]
        small = post_raw(world_a, order_body(world_a.dish.pk, size=300))
        large = post_raw(world_a, order_body(world_a.dish.pk, size=301))

        assert small.status_code == 201, small.content
        assert assert_problem(large, 413, "REQUEST_TOO_LARGE")["limit"] == 300

    def test_pages_outside_the_api_get_a_plain_413(self, world_a: World) -> None:
        response = APIClient().generic(
            "POST", "/dashboard/login/", b"x" * (2 * 1024 * 1024), content_type="text/plain"
        )
        assert response.status_code == 413
        assert response["Content-Type"].startswith("text/plain")


# --- through gunicorn -------------------------------------------------------------------


def send_raw(
    server: LiveServer | DevelopmentServer,
    head: str,
    body_parts: Iterable[bytes],
    *,
    timeout: float = DEADLINE_SECONDS,
) -> tuple[int, dict[str, str], bytes]:
    """Send a request byte by byte as written (headers, then whatever body parts the test
    chooses to send) and read the answer: (status, headers, body).

    A server that refuses a body answers and closes while the client may still be sending it;
    the send then fails (a broken pipe or a reset, depending on timing), and the answer already
    received is read all the same."""
    url = urlsplit(server.url)
    with socket.create_connection((url.hostname, url.port), timeout=timeout) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n")
        try:
            for part in body_parts:
                sock.sendall(part)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered early: read below
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, dict(response.getheaders()), response.read()


def request_head(
    world: World, *, length: int | None = None, chunked: bool = False, kind: str = "publishable"
) -> str:
    lines = [
        f"POST {ORDERS} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        f"Authorization: {world.auth(kind)}",
        "Idempotency-Key: live-big-order",
    ]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    return "\n".join(lines) + "\n"


def chunks(payload: bytes, size: int = 64 * 1024) -> Iterable[bytes]:
    for start in range(0, len(payload), size):
        part = payload[start : start + size]
        yield f"{len(part):x}\r\n".encode() + part + b"\r\n"
    yield b"0\r\n\r\n"


@pytest.fixture
def live_world(transactional_db: None) -> World:
    return build_world("livesize", live=True)


def problem_code(headers: dict[str, str], raw: bytes) -> str:
    content_type = {name.lower(): value for name, value in headers.items()}["content-type"]
    assert content_type == PROBLEM_JSON, headers
    return json.loads(raw)["code"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
class TestThroughGunicorn:
    def test_10_mb_announced_is_refused_after_the_first_kilobyte(
        self, hardening_server: LiveServer, live_world: World
    ) -> None:
        # Only 1 KiB of the announced 10 MB is ever sent: an answer at all proves the server
        # did not wait for (or read) the body.
        status, headers, raw = send_raw(
            hardening_server, request_head(live_world, length=TEN_MB), [b"{" + b" " * 1023]
        )

        assert status == 413
        assert problem_code(headers, raw) == "REQUEST_TOO_LARGE"
        assert never_authenticated(live_world)
        assert Order.all_tenants.count() == 0

    def test_a_whole_10_mb_upload_gets_the_413_not_a_broken_connection(
        self, hardening_server: LiveServer, live_world: World
    ) -> None:
        response = httpx.post(
            f"{hardening_server.url}{ORDERS}",
            content=order_body(live_world.dish.pk, size=TEN_MB),
            headers={
                **live_world.headers(),
                "Content-Type": "application/json",
                "Idempotency-Key": "live-10-mb",
            },
            timeout=DEADLINE_SECONDS,
        )

        assert response.status_code == 413
        assert problem_code(dict(response.headers), response.content) == "REQUEST_TOO_LARGE"
        assert "Traceback" not in hardening_server.log_tail(200)
        assert Order.all_tenants.count() == 0

    def test_a_chunked_body_over_the_limit_is_refused(
        self, hardening_server: LiveServer, live_world: World
    ) -> None:
        payload = order_body(live_world.dish.pk, size=2 * 1024 * 1024)
        status, headers, raw = send_raw(
            hardening_server, request_head(live_world, chunked=True), chunks(payload)
        )

        assert status == 413
        assert problem_code(headers, raw) == "REQUEST_TOO_LARGE"
        assert Order.all_tenants.count() == 0

    def test_a_chunked_body_within_the_limit_is_read(
        self, hardening_server: LiveServer, live_world: World
    ) -> None:
        payload = json.dumps(
            {"items": [{"dish_id": live_world.dish.pk, "quantity": 1}], "payment_method": "card"}
        ).encode()
        status, _, raw = send_raw(
            hardening_server,
            request_head(live_world, chunked=True, kind="diner"),
            chunks(payload, size=16),
        )

        assert status == 201, raw
        assert Order.all_tenants.filter(pk=json.loads(raw)["id"]).exists()

    @pytest.mark.parametrize("coding", ["gzip", "deflate", "compress"])
    def test_a_body_in_a_transfer_coding_besides_chunked_is_415(
        self, hardening_server: LiveServer, live_world: World, coding: str
    ) -> None:
        """Red: gunicorn takes ``Transfer-Encoding: gzip, chunked`` and hands the body on
        undecoded, and the app read it as if chunked alone: a plain JSON body so labelled placed
        the order (201), a gzip one was a 400 INVALID_JSON."""
        payload = json.dumps(
            {"items": [{"dish_id": live_world.dish.pk, "quantity": 1}], "payment_method": "card"}
        ).encode()
        head = request_head(live_world, chunked=True, kind="diner").replace(
            "Transfer-Encoding: chunked", f"Transfer-Encoding: {coding}, chunked"
        )

        status, headers, raw = send_raw(hardening_server, head, chunks(payload))

        assert status == 415, raw
        assert problem_code(headers, raw) == "UNSUPPORTED_MEDIA_TYPE"
        assert json.loads(raw)["detail"] == (
            f'Unsupported transfer coding "{coding}, chunked" in request. Send the body '
            "uncompressed (Transfer-Encoding: chunked alone, or a Content-Length)."
        )
        assert Order.all_tenants.count() == 0

    def test_an_empty_chunked_body_is_no_body(
        self, hardening_server: LiveServer, live_world: World
    ) -> None:
        """Red: a write sent chunked with no bytes in it (the way an HTTP/2 front or a
        streaming client sends a POST without a body), and so no Content-Type, was refused 415
        UNSUPPORTED_MEDIA_TYPE as a body that is not JSON: paying, refreshing a session or
        signing out without a body, as the client libraries send them, could not be done."""
        head = "\n".join(
            [
                "POST /api/v1/diner-sessions/refresh/ HTTP/1.1",
                "Host: 127.0.0.1",
                f"Authorization: {live_world.auth('diner')}",
                "Transfer-Encoding: chunked",
            ]
        )

        status, _, raw = send_raw(hardening_server, head + "\n", [b"0\r\n\r\n"])

        assert status == 200, raw
        assert json.loads(raw)["token"]

    @pytest.mark.parametrize(
        "body",
        [
            pytest.param(b"ZZ\r\n", id="a-size-that-is-not-hex"),
            pytest.param(b"-1\r\nx\r\n0\r\n\r\n", id="a-negative-size"),
            pytest.param(b"5\r\nhelloXX0\r\n\r\n", id="a-chunk-without-its-terminator"),
        ],
    )
    def test_a_chunked_body_that_is_not_well_formed_is_a_400(
        self, hardening_server: LiveServer, live_world: World, body: bytes
    ) -> None:
        # gunicorn raised its parse error out of the body's read: a 500 with a traceback
        status, headers, raw = send_raw(
            hardening_server, request_head(live_world, chunked=True, kind="diner"), [body]
        )

        assert status == 400, raw
        assert problem_code(headers, raw) == "BAD_REQUEST"
        assert "Traceback" not in hardening_server.log_tail(200)
        assert Order.all_tenants.count() == 0

    def test_a_chunked_body_cut_off_by_the_client_is_a_400(
        self, hardening_server: LiveServer, live_world: World
    ) -> None:
        url = urlsplit(hardening_server.url)
        head = request_head(live_world, chunked=True, kind="diner").replace("\n", "\r\n")
        with socket.create_connection((url.hostname, url.port), timeout=DEADLINE_SECONDS) as sock:
            sock.sendall(head.encode() + b"\r\n" + b"100\r\n" + b"{" * 10)
            sock.shutdown(socket.SHUT_WR)  # the rest of the announced chunk never comes
            response = http.client.HTTPResponse(sock)
            response.begin()
            status, raw = response.status, response.read()

        assert status == 400, raw
        assert json.loads(raw)["code"] == "BAD_REQUEST"
        assert "Traceback" not in hardening_server.log_tail(200)

    def test_clients_sending_bodies_slowly_hold_every_sync_worker(
        self, hardening_server: LiveServer
    ) -> None:
        """What README's production section asks a buffering proxy for: a sync worker reads a
        request's body from the client itself, so as many slow senders as workers (here 2,
        with no credentials) hold them all, and nothing else is answered until they stop."""
        url = urlsplit(hardening_server.url)
        head = (
            "POST /api/v1/payments/callback/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
        )
        slow = [socket.create_connection((url.hostname, url.port)) for _ in range(2)]
        try:
            for sock in slow:
                sock.sendall(head.encode())
            with pytest.raises(httpx.ReadTimeout):
                httpx.get(f"{hardening_server.url}/healthz", timeout=3)
        finally:
            for sock in slow:
                sock.close()
        assert (
            httpx.get(f"{hardening_server.url}/healthz", timeout=DEADLINE_SECONDS).status_code
            == 200
        )

    def test_unknown_api_paths_are_problem_json_on_the_live_server(
        self, hardening_server: LiveServer
    ) -> None:
        status, headers, raw = send_raw(
            hardening_server, "GET /api/v1/nope/ HTTP/1.1\nHost: 127.0.0.1\n", []
        )
        assert status == 404
        assert problem_code(headers, raw) == "NOT_FOUND"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_header_the_http_server_cannot_parse_gets_its_own_400_page(
    hardening_server: LiveServer,
) -> None:
    """The README's exception to "every /api/ error is problem+json": a request gunicorn
    refuses before the application sees it (a control character in a header) is answered by
    gunicorn's own 400 page. Nothing of the application runs."""
    head = "GET /api/v1/menu/ HTTP/1.1\nHost: 127.0.0.1\nIdempotency-Key: \x7f\n"
    status, headers, raw = send_raw(hardening_server, head, [])
    assert status == 400
    content_type = {name.lower(): value for name, value in headers.items()}["content-type"]
    assert content_type.startswith("text/html") and b"Invalid HTTP Header" in raw


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_chunked_body_the_development_server_cannot_read_is_411_and_keeps_the_key_free(
    transactional_db: None, tmp_path: Path
) -> None:
    """``make run`` serves with Django's development server, which reads a body by its
    ``Content-Length`` only: a chunked order reached the view as no body at all, and its 400
    was stored under the client's key, so the client's retry (the same key, the same bytes)
    was answered that 400 again. Such a request is refused before the engine (411
    ``LENGTH_REQUIRED``), and the retry with a length places the order."""
    world = build_world("devchunked")  # the demo's own SECRET_KEY signs its sessions
    payload = json.dumps(
        {"items": [{"dish_id": world.dish.pk, "quantity": 1}], "payment_method": "card"}
    ).encode()
    with development_server(tmp_path / "runserver.log") as server:
        status, headers, raw = send_raw(
            server, request_head(world, chunked=True, kind="diner"), chunks(payload)
        )
        assert status == 411, raw
        assert problem_code(headers, raw) == "LENGTH_REQUIRED"

        retried = httpx.post(
            f"{server.url}{ORDERS}",
            content=payload,
            headers={
                **world.headers("diner"),
                "Content-Type": "application/json",
                "Idempotency-Key": "live-big-order",
            },
            timeout=DEADLINE_SECONDS,
        )
    assert retried.status_code == 201, retried.text
    assert Order.all_tenants.count() == 1

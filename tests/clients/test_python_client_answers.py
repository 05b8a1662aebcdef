"""What the Python client takes for an answer. ``timeout`` bounds a whole attempt: an answer
trickled a byte at a time (each read well within httpx's own read timeout), its head or its
body, is given up at the deadline and retried like any lost answer, instead of holding the
call for as long as the server likes. And a success page that is not the API's (a captive
portal) says nothing about the operation: it is retried with the same key."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from ordering_client import (
    ApiError,
    ApiResult,
    NetworkError,
    OrderingClient,
    RetriesExhaustedError,
    RetryEvent,
    RetryPolicy,
)

BODY_BYTES = 200  # at one byte per 0.05 s: 10 s to send it all


class TricklingServer:
    """Answers every request 200 with a JSON body sent one byte at a time; counts the bytes
    of the body each connection took before the client hung up."""

    def __init__(self, *, head_too: bool = False) -> None:
        self.head_too = head_too  # the status line and headers trickled too
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.sent: list[int] = []
        self.sending = 0  # bytes the current connection has sent so far
        self.head_bytes = 0  # of a trickled head, how many it has
        self.answered = threading.Event()  # a connection ended: its count is in ``sent``
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed by close() while accepting
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        sent = 0
        with conn:
            conn.recv(65536)
            body = b'"' + b"x" * (BODY_BYTES - 2) + b'"'
            head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            head += f"Content-Length: {len(body)}\r\n\r\n"
            if self.head_too:  # a header of padding: the head alone takes 10 s
                head = head[:-2] + "X-Padding: " + "p" * 180 + "\r\n\r\n"
                self.head_bytes = len(head.encode())
            try:
                if self.head_too:
                    body = head.encode() + body
                else:
                    conn.sendall(head.encode())
                for byte in body:
                    if self._stop.wait(0.05):
                        break
                    conn.sendall(bytes([byte]))
                    sent += 1
                    self.sending = sent
            except OSError:
                pass  # the client hung up
        self.sent.append(sent)
        self.answered.set()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()


@pytest.fixture
def trickling() -> Iterator[TricklingServer]:
    server = TricklingServer()
    yield server
    server.close()


def test_an_answer_slower_than_the_timeout_is_given_up_at_the_deadline(
    trickling: TricklingServer,
) -> None:
    client = OrderingClient(
        trickling.url, "pk_test.secret", timeout=1.0, retry=RetryPolicy(max_attempts=1)
    )
    with pytest.raises(RetriesExhaustedError) as raised:
        client.menu()
    client.close()
    assert isinstance(raised.value.last_error, NetworkError)
    assert "ReadTimeout" in str(raised.value.last_error)
    # the client hung up long before the server had sent it all (red with httpx's timeout
    # alone: each byte arrives within it, and the whole body is read)
    assert trickling.answered.wait(timeout=60)
    assert trickling.sent and max(trickling.sent) < BODY_BYTES


def test_a_head_slower_than_the_timeout_is_given_up_at_the_deadline() -> None:
    """The status line and headers trickled a byte at a time: each read is well within
    httpx's read timeout, and the deadline was checked only while reading the body, so the
    attempt lasted as long as the server went on (red: the call returned only once the whole
    head had come, about 10 s here, for a 1 s timeout)."""
    trickling = TricklingServer(head_too=True)
    client = OrderingClient(
        trickling.url, "pk_test.secret", timeout=1.0, retry=RetryPolicy(max_attempts=1)
    )
    with pytest.raises(RetriesExhaustedError) as raised:
        client.menu()
    sent_when_given_up = trickling.sending
    client.close()
    trickling.close()
    assert isinstance(raised.value.last_error, NetworkError)
    assert "ReadTimeout" in str(raised.value.last_error)
    assert 0 < sent_when_given_up < trickling.head_bytes  # given up with the head still coming


def test_a_success_page_not_from_the_api_is_an_unknown_outcome_retried_with_the_key() -> None:
    """A captive portal answers 200 with its own page: not the API's answer (no
    X-Idempotent-Result), so the operation's outcome is unknown and it is retried with the
    same key (red when any 2xx counts: the call returns the portal and forgets the key)."""
    answer, order_keys = guest_api(
        lambda: httpx.Response(200, html="<html>Sign in to the cafe's wifi</html>"),
        lambda: httpx.Response(201, json={"id": "1"}, headers={"X-Idempotent-Result": "MISS"}),
    )

    placed, events = place_with_quick_retries(answer)
    assert (placed.status, placed.json()) == (201, {"id": "1"})
    assert len(order_keys) == 2 and order_keys[0] == order_keys[1] is not None
    assert isinstance(events[0].error, NetworkError) and "not the API's" in str(events[0].error)


def test_a_call_can_take_about_max_elapsed_plus_timeout() -> None:
    """A server that never answers: every attempt runs its whole ``timeout``. The last one
    started within ``max_elapsed`` and ran on past it, so the call took about ``max_elapsed +
    timeout``, never more (red when ``max_elapsed`` is not checked: attempts go on to
    ``max_attempts``)."""
    silent = socket.create_server(("127.0.0.1", 0))  # never accepts: no answer ever comes
    port = silent.getsockname()[1]
    client = OrderingClient(
        f"http://127.0.0.1:{port}",
        "pk_test.secret",
        timeout=0.7,
        retry=RetryPolicy(max_attempts=100, base_delay=0.01, max_delay=0.01, max_elapsed=1.0),
    )
    with pytest.raises(RetriesExhaustedError) as raised:
        client.menu()
    client.close()
    silent.close()
    # the second attempt began within max_elapsed, a third would have begun past it: the
    # count, not the clock of a busy machine, shows the bound
    assert raised.value.attempts == 2
    assert "ReadTimeout" in str(raised.value.last_error)


def test_an_answer_whose_body_cannot_be_decoded_is_an_unknown_outcome_retried_with_the_key() -> (
    None
):
    """A proxy passes on the order's answer with a body its Content-Encoding cannot decode (a
    gzip stream cut or mangled): the answer is unreadable, so the outcome is unknown and the
    operation is retried with the same key (red: httpx.DecodingError escaped the call, no
    OrderingError, no retry)."""
    answer, order_keys = guest_api(
        lambda: httpx.Response(
            201,
            content=b"\x1f\x8b\x08\x00 not a gzip stream",
            headers={
                "Content-Type": "application/json",
                "Content-Encoding": "gzip",
                "X-Idempotent-Result": "MISS",
            },
        ),
        lambda: httpx.Response(201, json={"id": "1"}, headers={"X-Idempotent-Result": "HIT"}),
    )

    placed, events = place_with_quick_retries(answer)
    assert (placed.status, placed.replayed) == (201, True)
    assert len(order_keys) == 2 and order_keys[0] == order_keys[1] is not None
    assert isinstance(events[0].error, NetworkError) and "DecodingError" in str(events[0].error)


def place_with_quick_retries(answer: Any) -> tuple[ApiResult, list[RetryEvent]]:
    """One order placed through a fake server that answers with ``answer``, retried quickly:
    the final answer and the retries the client reported."""
    events: list[RetryEvent] = []
    client = OrderingClient(
        "http://api.test",
        "pk_test.secret",
        transport=httpx.MockTransport(answer),
        retry=RetryPolicy(base_delay=0.01, max_delay=0.05),
        on_retry=events.append,
    )
    try:
        placed = client.place_order(
            {"items": [{"dish_id": 1, "quantity": 1}], "payment_method": "card"}
        )
    finally:
        client.close()
    return placed, events


def guest_api(*order_answers: Callable[[], httpx.Response]) -> tuple[Any, list[str | None]]:
    """A fake API of one guest session whose order endpoint answers what ``order_answers``
    make, in turn (the last one again), and the keys the order requests carried. Made while
    answering: httpx decodes a body as the response is made, so an undecodable one must fail
    inside the client's call."""
    order_keys: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/diner-sessions/":
            return httpx.Response(
                201,
                json={"token": "t", "diner_id": "guest_1", "expires_at": "2999-01-01T00:00:00Z"},
            )
        order_keys.append(request.headers.get("idempotency-key"))
        return order_answers[min(len(order_keys), len(order_answers)) - 1]()

    return answer, order_keys


def test_a_redirect_is_a_final_error_naming_where_it_points() -> None:
    """An ``http://`` address a proxy answers with a redirect to ``https://`` is the caller's
    to fix: one attempt, and an ``ApiError`` naming the new address."""
    answer, order_keys = guest_api(
        lambda: httpx.Response(301, headers={"Location": "https://api.test/api/v1/orders/"})
    )

    with pytest.raises(ApiError) as raised:
        place_with_quick_retries(answer)

    assert not isinstance(raised.value, RetriesExhaustedError)
    assert raised.value.status == 301
    assert "redirected to https://api.test/api/v1/orders/" in raised.value.detail
    assert len(order_keys) == 1

"""The Python client's ``timeout`` bounds a whole attempt: an answer trickled a byte at a time
(each read well within httpx's own read timeout) is given up at the deadline and retried like
any lost answer, instead of holding the call for as long as the server likes."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from ordering_client import NetworkError, OrderingClient, RetriesExhaustedError, RetryPolicy

BODY_BYTES = 200  # at one byte per 0.05 s: 10 s to send it all


class TricklingServer:
    """Answers every request 200 with a JSON body sent one byte at a time; counts the bytes
    of the body each connection took before the client hung up."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.sent: list[int] = []
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
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        sent = 0
        with conn:
            conn.recv(65536)
            body = b'"' + b"x" * (BODY_BYTES - 2) + b'"'
            head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            head += f"Content-Length: {len(body)}\r\n\r\n"
            try:
                conn.sendall(head.encode())
                for byte in body:
                    if self._stop.wait(0.05):
                        break
                    conn.sendall(bytes([byte]))
                    sent += 1
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

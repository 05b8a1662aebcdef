"""A TCP proxy in front of a live HTTP server that loses answers the server already gave.

The failure a retrying client must survive is not "the server never got my request" but "the
server did the work and the answer never reached me" (a dropped mobile connection, a load
balancer timing out). :class:`DroppingProxy` makes exactly that happen on demand: for a request
that matches an armed rule it forwards the request, reads the server's **whole** response (so
the server has committed), keeps it in :attr:`DroppingProxy.dropped`, and resets the client's
connection without sending a byte of it. It can also answer in the server's place, never
forwarding (:meth:`DroppingProxy.answer_instead`): a load balancer's 408 when it tired of
waiting for a request's body. Every other request passes through untouched.

One request per connection, with a ``Content-Length`` body, is assumed: the live gunicorn's sync
workers answer ``Connection: close``, and the clients send no chunked bodies. The request is read
whole before it is forwarded.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

_HEADER_END = b"\r\n\r\n"


@dataclass(frozen=True)
class DroppedResponse:
    """A response the server sent and the client never received."""

    method: str
    path: str
    raw: bytes

    @property
    def status(self) -> int:
        return int(self.raw.split(b" ", 2)[1])

    @property
    def headers(self) -> dict[str, str]:
        head = self.raw.partition(_HEADER_END)[0].decode("latin-1").split("\r\n")[1:]
        return {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head)}

    @property
    def body(self) -> bytes:
        return self.raw.partition(_HEADER_END)[2]


class DroppingProxy:
    """Listens on a free loopback port and forwards to ``upstream`` (``http://host:port``)."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.dropped: list[DroppedResponse] = []
        self._rules: list[tuple[str, str]] = []  # (method, path prefix), one per answer to drop
        # (method, path prefix, status), one per request answered without reaching the server
        self._answers: list[tuple[str, str, int]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def drop_responses(self, count: int = 1, *, method: str = "POST", path: str = "/") -> None:
        """Lose the answers of the next ``count`` requests of ``method`` whose path starts with
        ``path``."""
        with self._lock:
            self._rules.extend([(method.upper(), path)] * count)

    def answer_instead(
        self, status: int, count: int = 1, *, method: str = "POST", path: str = "/"
    ) -> None:
        """Answer the next ``count`` requests of ``method`` whose path starts with ``path``
        with an empty ``status`` response, as a proxy in front of the server would, without
        forwarding them: the server never sees them."""
        with self._lock:
            self._answers.extend([(method.upper(), path, status)] * count)

    def armed(self) -> int:
        """How many answers are still to be dropped."""
        with self._lock:
            return len(self._rules)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.close()

    def _take_rule(self, method: str, path: str) -> bool:
        with self._lock:
            for i, (rule_method, prefix) in enumerate(self._rules):
                if rule_method == method and path.startswith(prefix):
                    del self._rules[i]
                    return True
            return False

    def _take_answer(self, method: str, path: str) -> int | None:
        with self._lock:
            for i, (rule_method, prefix, status) in enumerate(self._answers):
                if rule_method == method and path.startswith(prefix):
                    del self._answers[i]
                    return status
            return None

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self._upstream, timeout=30)
        except OSError:
            _reset(client)
            return
        with client, upstream:
            request = _read_message(client)
            if not request:
                return
            method, _, rest = request.partition(b" ")
            path = rest.partition(b" ")[0].decode("latin-1")
            status = self._take_answer(method.decode("latin-1"), path)
            if status is not None:
                client.sendall(
                    f"HTTP/1.1 {status} Proxy Answer\r\nContent-Length: 0\r\n"
                    "Connection: close\r\n\r\n".encode()
                )
                return
            drop = self._take_rule(method.decode("latin-1"), path)
            upstream.sendall(request)
            if not drop:
                _pump(upstream, client)
                return
            raw = _read_message(upstream, until_close=True)
            with self._lock:
                self.dropped.append(DroppedResponse(method.decode("latin-1"), path, raw))
            _reset(client)


def _pump(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := source.recv(65536):
            target.sendall(chunk)


def _read_message(sock: socket.socket, *, until_close: bool = False) -> bytes:
    """One whole HTTP message: headers, then Content-Length bytes. Without that header a
    request has no body, and a response (``until_close``) lasts until the server closes."""
    data = b""
    while _HEADER_END not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(_HEADER_END)
    length = None if until_close else 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < (length if length is not None else len(body) + 1):
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + _HEADER_END + body


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0): the client sees a connection reset, not a clean EOF."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()

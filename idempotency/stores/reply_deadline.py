"""Redis connections that read each reply within the socket timeout in all, not per read.

redis-py's ``socket_timeout`` bounds each ``recv`` on the socket, not a reply. A node that
answers a few bytes at a time, each within the timeout (a proxy or a network path in trouble,
a node starved of CPU), held every call for as long as it trickled: a claim took a minute,
gunicorn killed the worker at its ``timeout`` (30 s) with the call still running, so the node's
circuit breaker never heard of it (the call never ended) and never opened, and every worker
that took a request was killed in turn. The API was down while Redis was merely slow, where a
slow node is meant to send its tenants database-only (docs/scaling.md).

With these connection classes a reply that is not complete ``socket_timeout`` after its read
began fails as redis-py's ``TimeoutError``, as a silent node does: the connection is dropped,
the breaker counts a failed call, and the engine answers from the database. Reads outside a
reply (``can_read``, a pub/sub wait with a timeout of its own or none) keep redis-py's
behaviour.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.connection import AbstractConnection
from redis.utils import SENTINEL

__all__ = [
    "DeadlineConnection",
    "DeadlineSSLConnection",
    "DeadlineUnixDomainSocketConnection",
    "connection_class_for",
]


class _DeadlineSocket:
    """A connected socket whose reads stop at its connection's reply deadline, if one is set;
    everything else is the socket's own."""

    def __init__(self, sock: Any, connection: _ReplyDeadline) -> None:
        self._sock = sock
        self._connection = connection

    def recv(self, *args: Any) -> bytes:
        return self._within_deadline(self._sock.recv, *args)

    def recv_into(self, *args: Any) -> int:
        return self._within_deadline(self._sock.recv_into, *args)

    def _within_deadline(self, read: Any, *args: Any) -> Any:
        deadline = self._connection.reply_deadline
        if deadline is None:
            return read(*args)
        left = deadline - time.monotonic()
        if left <= 0:
            # socket.timeout, as a read past the timeout raises: redis-py's TimeoutError follows
            raise TimeoutError("the reply took longer than the socket timeout")
        timeout = self._sock.gettimeout()
        if timeout is not None and timeout <= left:
            return read(*args)
        self._sock.settimeout(left)
        try:
            return read(*args)
        finally:
            self._sock.settimeout(timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _ReplyDeadline(AbstractConnection):
    """Sets a deadline of ``socket_timeout`` on each reply read through this connection."""

    reply_deadline: float | None = None

    def _connect(self) -> Any:
        return _DeadlineSocket(super()._connect(), self)

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        # A read given a timeout of its caller's is a wait, not a command's reply: pub/sub's
        # listen() (None: until a message comes; the Lua script channel's listener idles on
        # it) and get_message(timeout=...) keep redis-py's behaviour.
        if not self.socket_timeout or kwargs.get("timeout", SENTINEL) is not SENTINEL:
            return super().read_response(*args, **kwargs)
        self.reply_deadline = time.monotonic() + self.socket_timeout
        try:
            return super().read_response(*args, **kwargs)
        finally:
            self.reply_deadline = None


class DeadlineConnection(_ReplyDeadline, redis.Connection):
    """A TCP connection (``redis://``) whose replies are read within ``socket_timeout``."""


class DeadlineSSLConnection(_ReplyDeadline, redis.SSLConnection):
    """A TLS connection (``rediss://``) whose replies are read within ``socket_timeout``."""


class DeadlineUnixDomainSocketConnection(_ReplyDeadline, redis.UnixDomainSocketConnection):
    """A unix socket connection (``unix://``) whose replies are read within ``socket_timeout``."""


def connection_class_for(url: str) -> type[AbstractConnection]:
    """The deadline connection class for a Redis URL's scheme (what redis-py would pick)."""
    scheme = urlsplit(url).scheme
    if scheme == "rediss":
        return DeadlineSSLConnection
    if scheme == "unix":
        return DeadlineUnixDomainSocketConnection
    return DeadlineConnection

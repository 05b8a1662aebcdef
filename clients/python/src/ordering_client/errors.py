"""What the client raises. Catch :class:`ApiError` for answers the server gave, and
:class:`RetriesExhaustedError` for operations whose outcome is still unknown; never catch
:class:`IdempotencyKeyReusedError` to retry it: it is a bug in the calling code."""

from __future__ import annotations

from typing import Any


class OrderingError(Exception):
    """Base class of everything this client raises."""


class ApiError(OrderingError):
    """The server answered with an error that retrying cannot change (a 4xx other than a
    proxy's 408, 409 ``IDEMPOTENCY_REQUEST_IN_PROGRESS`` and 429). When retryable answers (5xx,
    408, 409 in progress, 429) use up the attempts, :class:`RetriesExhaustedError` is raised
    instead, with the last one as its ``last_error``.

    ``code`` is the machine-readable ``code`` of the problem+json body (None if the body had
    none); ``problem`` is the whole parsed body.
    """

    def __init__(
        self,
        *,
        status: int,
        code: str | None,
        detail: str,
        problem: dict[str, Any],
        headers: dict[str, str],
        body: bytes,
    ) -> None:
        super().__init__(f"{status} {code or ''}: {detail}".strip())
        self.status = status
        self.code = code
        self.detail = detail
        self.problem = problem
        self.headers = headers
        self.body = body


class IdempotencyKeyReusedError(ApiError):
    """422 ``IDEMPOTENCY_KEY_REUSED``: this key was already used for a *different* request.

    A programming error, never a transient one: the calling code reused a key (or an
    ``operation_id``) for another payload. Nothing was executed. A stored key that may already
    have run the operation (kept after its success, or resumed with its outcome unknown) stays
    stored: the ``operation_id`` still stands for its first payload, which replays, and every
    other payload under it is refused again. Fix the caller (a new ``operation_id`` for a new
    payload) instead of retrying.
    """


class NetworkError(OrderingError):
    """No answer: the connection failed, was reset, or timed out, or the answer's body could
    not be decoded (its Content-Encoding garbled on the way). The server may or may not have
    executed the request; a retry with the same key finds out without doing it twice."""


class RetriesExhaustedError(OrderingError):
    """Every allowed attempt failed transiently (network, 5xx, 408, 409 in progress, 429).

    The outcome is unknown. The operation's key stays in storage: calling the same operation
    again (same ``operation_id``, or the same request) reuses it, so a later call — after a
    restart too — replays the result if the server did execute it.
    """

    def __init__(
        self, *, attempts: int, last_error: ApiError | NetworkError, idempotency_key: str | None
    ) -> None:
        super().__init__(f"gave up after {attempts} attempts: {last_error}")
        self.attempts = attempts
        self.last_error = last_error
        self.idempotency_key = idempotency_key


class OrderAlreadyPlacedError(ApiError):
    """409 ``ORDER_ALREADY_PLACED``: this key already placed an order, and the server no
    longer keeps that first answer to replay it (its retention ran out, or it was purged).

    The order exists and nothing new was placed: ``order_id`` names it (the ``Location``
    header too), ``client.order(order_id)`` fetches it. Not retried, and not a reason to order
    again.
    """

    @property
    def order_id(self) -> str | None:
        order_id = self.problem.get("order_id")
        return None if order_id is None else str(order_id)


class SessionChangedError(OrderingError):
    """The operation's key was made for a diner this client no longer acts as, and an
    attempt with it may already have reached the server. Keys are scoped per diner: sent as
    another diner, the key would not replay the earlier attempt, the server would run the
    operation again. So nothing more is sent, and the key stays stored.

    Two ways to get here:

    - the session changed diner: it expired (at its maximum age, or an app that crashed
      mid-request restarted after its lifetime) and a new guest session was opened, or the
      ``session_provider`` handed over another diner's session, before a retry or before a
      later call resumed the stored key. ``diner_id`` is the new diner;
    - the server answered 401 (the session was revoked or expired) to an attempt whose key
      may already have reached it (a retry after an answer that never came, or a key resumed
      from storage), and, with a ``session_provider``, to the provider's new session too. No
      new session is opened yet: ``diner_id`` is None.

    The earlier attempt may have executed. The stored key stays until ``operation_ttl`` runs
    out, so the same call keeps saying this; to place the order anyway, knowingly, call again
    with a new ``operation_id`` (or ``idempotency_key``). A key that cannot have reached the
    server yet (the session changed before its first attempt was sent) is forgotten instead.
    """

    def __init__(
        self, *, idempotency_key: str, previous_diner_id: str, diner_id: str | None
    ) -> None:
        now = "its session ended" if diner_id is None else f"now {diner_id!r}"
        super().__init__(
            f"operation started as diner {previous_diner_id!r}, {now}: "
            "not resent (its outcome is unknown)"
        )
        self.idempotency_key = idempotency_key
        self.previous_diner_id = previous_diner_id
        self.diner_id = diner_id

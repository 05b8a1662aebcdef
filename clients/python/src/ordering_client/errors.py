"""What the client raises. Catch :class:`ApiError` for answers the server gave, and
:class:`RetriesExhaustedError` for operations whose outcome is still unknown; never catch
:class:`IdempotencyKeyReusedError` to retry it: it is a bug in the calling code."""

from __future__ import annotations

from typing import Any


class OrderingError(Exception):
    """Base class of everything this client raises."""


class ApiError(OrderingError):
    """The server answered with an error that retrying cannot change (a 4xx other than 409
    ``IDEMPOTENCY_REQUEST_IN_PROGRESS`` and 429). When retryable answers (5xx, 409 in
    progress, 429) use up the attempts, :class:`RetriesExhaustedError` is raised instead, with
    the last one as its ``last_error``.

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
    ``operation_id``) for another payload. Nothing was executed. The client forgets the key it
    had stored for the operation, so the next call makes a new one; fix the caller instead of
    retrying.
    """


class NetworkError(OrderingError):
    """No answer: the connection failed, was reset, or timed out. The server may or may not
    have executed the request; a retry with the same key finds out without doing it twice."""


class RetriesExhaustedError(OrderingError):
    """Every allowed attempt failed transiently (network, 5xx, 409 in progress, 429).

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


class SessionChangedError(OrderingError):
    """The operation has a stored key from an earlier attempt, made as another diner: the
    guest session of that attempt expired (an app that crashed mid-request and restarted
    after the session's lifetime) and this client now acts as a new guest.

    The earlier attempt may have executed. Sending its key now would not replay it: keys are
    scoped per diner, so the server would run the operation again, as this diner's. Nothing
    is sent. The stored key stays until ``operation_ttl`` runs out, so the same call keeps
    saying this; to place the order anyway, knowingly, call again with a new
    ``operation_id`` (or ``idempotency_key``).
    """

    def __init__(self, *, idempotency_key: str, previous_diner_id: str, diner_id: str) -> None:
        super().__init__(
            f"operation started as diner {previous_diner_id!r}, now {diner_id!r}: "
            "not resent (its outcome is unknown)"
        )
        self.idempotency_key = idempotency_key
        self.previous_diner_id = previous_diner_id
        self.diner_id = diner_id

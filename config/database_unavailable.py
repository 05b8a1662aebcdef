"""503 ``DATABASE_UNAVAILABLE`` when PostgreSQL cannot be reached, instead of a 500.

A request that needs the database while it is down, refusing connections, silent past
``DB_CONNECT_TIMEOUT``, restarting or out of connection slots was answered 500 ``SERVER_ERROR``,
"a bug on our side": clients could not tell an outage from a bug, and operators' alerts on 500s
fired for an outage that the readiness probe already reports. It is answered 503 with
``Retry-After`` (problem+json on an API path, a short page elsewhere) and logged in one line, not
with a traceback per request.

The key stays retryable: the exception passes through the idempotency engine, which releases
its claim and writes nothing (a 5xx is never kept), before this middleware answers. A failure
during the commit itself leaves the outcome unknown to this process; the retry with the same key
then replays what was committed, if anything was, as after any 5xx.

Only a connection-level failure qualifies (psycopg's error without an SQLSTATE, one of class 08
"connection exception", the server shutting down or starting up, or out of connection slots):
a deadlock, a cancelled statement or SQLite's busy writer is not an outage.

Django calls ``process_exception`` with what a view raised: DRF's views re-raise what the API's
exception handler does not map (``config/api_errors.py``), so this one place answers the API,
the dashboard and the admin alike.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import psycopg
from django.db import OperationalError
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

from config.api_error_pages import is_api_path
from config.api_errors import problem_http_response

DATABASE_UNAVAILABLE = "DATABASE_UNAVAILABLE"
# Seconds a client waits before it retries: a restart or a failover takes a few.
RETRY_AFTER_SECONDS = 5
DETAIL = "The database is unavailable; nothing was done or kept, retry later with the same key"
# SQLSTATEs of a server that ends or refuses sessions: admin, crash, starting up, idle session
# timeout; and too many connections.
_OUTAGE_STATES = frozenset({"57P01", "57P02", "57P03", "57P05", "53300"})

logger = logging.getLogger(__name__)


def is_database_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` is Django's error for PostgreSQL being unreachable (module docstring)."""
    cause = exc.__cause__
    if not isinstance(exc, OperationalError) or not isinstance(cause, psycopg.OperationalError):
        return False
    state = cause.sqlstate
    return state is None or state.startswith("08") or state in _OUTAGE_STATES


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        return outage_answer(request, exception)


def outage_answer(request: HttpRequest, exception: BaseException) -> HttpResponse | None:
    """The 503 for ``exception`` when it is PostgreSQL unreachable, else None. A middleware
    that reads the database itself answers with it: Django hands this middleware's
    ``process_exception`` only what a view raised."""
    if not is_database_unavailable(exception):
        return None
    logger.warning("PostgreSQL unavailable (%s); answered 503", str(exception).strip())
    if is_api_path(request):
        response = problem_http_response(503, DATABASE_UNAVAILABLE, DETAIL)
    else:  # a page of its own: the site's layout reads the user and tenant from the database
        response = HttpResponse(render_to_string("503_database.html"), status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response

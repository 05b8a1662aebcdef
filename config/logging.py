"""One JSON object per log line, with the request context (``config/request_context.py``);
or, with ``LOG_FORMAT=text``, a plain line, its request path masked the same way.

A line logged while a tenant's request runs drops the fields of
``settings.LOG_FIELDS_TENANT_MAY_KEEP`` that the tenant does not keep (``Tenant.log_fields``).
A line about a request logged after it ran (Django's own ``django.request`` line of a 4xx or
5xx) takes the context the request ran with, which the middleware left on it, and writes a
URL parameter of its path named as a dropped field (a diner id, an order id) as its name; a
request refused before its tenant was known has every such parameter written as its name, and a
path no route matched has so each part that stands where a route takes one.
The development server's line about each request it served (``django.server``, ``make run``)
writes its path so, and leaves out the socket it came in on (the client's address).
"""

from __future__ import annotations

import functools
import json
import logging
import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from django.conf import settings
from django.http import HttpRequest
from django.urls import Resolver404, ResolverMatch, URLResolver, get_resolver, resolve

from config.request_context import RequestContext, current

_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        context = _context_of(record)
        line = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "request_id": context.request_id or None,
            "tenant": context.tenant or None,
            "idempotency_key_hmac": context.idempotency_key_hash or None,
        }
        line.update(
            {
                k: v
                for k, v in record.__dict__.items()
                if k not in _STANDARD and not k.startswith("_")
            }
        )
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        dropped = _dropped_fields(context)
        if context.log_fields is not None:
            for name in dropped:
                line.pop(name, None)
        _mask_request_path(line, record, dropped)
        return json.dumps({k: v for k, v in line.items() if v is not None}, default=str)


class TextFormatter(logging.Formatter):
    """Plain lines (``LOG_FORMAT=text``): time, level, logger and message, with a request's
    path masked as :class:`JsonFormatter` masks it. Django's line about a refused request
    otherwise wrote the path as sent, a diner id its tenant keeps out of its logs included."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        line = {"msg": text}
        _mask_request_path(line, record, _dropped_fields(_context_of(record)))
        return str(line["msg"])


def _context_of(record: logging.LogRecord) -> RequestContext:
    """The request context of the line: the running request's, or for a line about a request
    logged after it ran, the one the middleware left on it."""
    context = current()
    if not context.request_id:
        context = getattr(getattr(record, "request", None), "log_context", context)
    return context


def _dropped_fields(context: RequestContext) -> set[str]:
    """The optional fields (``settings.LOG_FIELDS_TENANT_MAY_KEEP``) a line must not carry:
    those its tenant does not keep; all of them for a request refused before its tenant was
    known (a credential refused, or an Accept header or ?format= the API cannot write, which
    DRF refuses before it authenticates: the path may carry the id of a diner whose restaurant
    keeps none in its logs); none when the tenant keeps them all."""
    optional = set(settings.LOG_FIELDS_TENANT_MAY_KEEP)
    if context.log_fields is not None:
        return optional - context.log_fields
    if not context.tenant:
        return optional
    return set()


_ROUTE_PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")


def _mask_request_path(line: dict[str, Any], record: logging.LogRecord, dropped: set[str]) -> None:
    """A line about a request (Django's ``django.request`` line of a 4xx or 5xx) names its
    path, and a path can carry what the tenant chose not to log: a URL parameter named as a
    dropped field (``/api/v1/diners/<diner_id>/…``, ``/api/v1/orders/<order_id>/…``) is
    written as its name, in ``msg`` and in ``request``. ``request`` names no query string
    (``repr`` of a request adds it): a search or a filter can name a diner too."""
    if record.name == SERVED_REQUEST_LOGGER:
        _mask_served_request(line, record, dropped)
        return
    request = getattr(record, "request", None)
    if not isinstance(request, HttpRequest):
        return
    match = request.resolver_match
    masked = _routed(match, dropped) if match is not None else _unrouted(request.path, dropped)
    if masked is not None:
        # Django writes the path into its line escaped (``log_response``: ``unicode_escape``, a
        # letter outside ASCII as ``\xe9``), where the path as the request holds it is not found
        line["msg"] = (
            str(line["msg"])
            .replace(_escaped(request.path), _escaped(masked))
            .replace(request.path, masked)
        )
    if "request" in line:  # the path alone: what a client searched or filtered for stays out
        line["request"] = f"<{type(request).__name__}: {request.method} {masked or request.path!r}>"


def _escaped(text: str) -> str:
    """``text`` as Django's request lines write a path (``django.utils.log.log_response``)."""
    return text.encode("unicode_escape").decode("ascii")


# Django's development server (``make run``) logs each request it served here:
# ``"<method> <target> HTTP/1.1" <status> <size>``, with the socket it came in on
SERVED_REQUEST_LOGGER = "django.server"


def _mask_served_request(
    line: dict[str, Any], record: logging.LogRecord, dropped: set[str]
) -> None:
    """The development server's line about each request it served wrote its path as sent,
    whatever the tenant chose, and the socket it came in on (the client's address and port).
    The socket is left out, and the path is written as a line about a request refused
    before its tenant was known writes it (the line is logged once the request has run)."""
    line.pop("request", None)
    args = record.args if isinstance(record.args, tuple) else ()
    target = str(args[0]).split(" ")[1:2] if args else []
    if not target or not dropped:
        return
    path, mark, query = target[0].partition("?")
    try:
        match = resolve(unquote(path))
    except Resolver404:
        masked = _unrouted(unquote(path), dropped)
    else:
        masked = _routed(match, dropped)
    if masked is not None:
        line["msg"] = str(line["msg"]).replace(target[0], masked + mark + query, 1)


def _routed(match: ResolverMatch, dropped: set[str]) -> str | None:
    """The path of ``match`` with each dropped URL parameter written as its name; None when
    it has none."""
    if not match.route or not dropped & set(match.kwargs):
        return None

    def parameter(found: re.Match[str]) -> str:
        name = found[1]
        return f"<{name}>" if name in dropped else str(match.kwargs.get(name, found[0]))

    return "/" + _ROUTE_PARAMETER.sub(parameter, match.route)


def _unrouted(path: str, dropped: set[str]) -> str | None:
    """A path no route matched (a 404 before any tenant was known: a mistyped action, a
    missing trailing slash) still carries what the client put where a route takes a
    parameter: ``/api/v1/diners/alice/revoke-sessions`` names a diner as surely as the route
    does. Each part that stands where a route of the site, read from its start, takes a
    dropped field is written as its name, a part no route names as sent; None when no part
    is written so. Parts are read past empty ones, as a route has none: a doubled slash (a
    client joining a base URL that ends in ``/`` to a path that starts with one,
    ``//api/v1/diners/alice/…``) moved every part off the route and wrote the id as sent."""
    if not dropped:
        return None
    parts = path.removeprefix("/").split("/")
    filled = [i for i, part in enumerate(parts) if part]
    names: dict[int, str] = {}
    for route in _route_parts(get_resolver()):
        patterns = [pattern for pattern in route if pattern]
        for i, pattern in zip(filled, patterns, strict=False):
            parameter = _ROUTE_PARAMETER.fullmatch(pattern)
            if parameter is None:
                if parts[i] != pattern:
                    break
            elif parameter[1] in dropped:
                names[i] = f"<{parameter[1]}>"
    if not names:
        return None
    return "/" + "/".join(names.get(i, part) for i, part in enumerate(parts))


@functools.cache
def _route_parts(resolver: URLResolver) -> tuple[tuple[str, ...], ...]:
    """Every route of the URLconf (as ``ResolverMatch.route`` spells it), split at ``/``."""
    routes: list[tuple[str, ...]] = []

    def walk(patterns: Any, prefix: str) -> None:
        for item in patterns:
            route = prefix + str(item.pattern).removeprefix("^")
            if isinstance(item, URLResolver):
                walk(item.url_patterns, route)
            else:
                routes.append(tuple(route.split("/")))

    walk(resolver.url_patterns, "")
    return tuple(routes)


class RefusedHostFilter(logging.Filter):
    """A request naming a host the site does not answer to is the client's error, refused with
    a 400: one WARNING line, not an ERROR with Django's traceback (a scrape or a probe by
    address from outside the allow-lists would fill the log with them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = None
        record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True

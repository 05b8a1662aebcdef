"""DRF integration: ``@idempotent(...)`` on an APIView handler puts it behind the engine.

::

    class OrderListCreateView(APIView):
        @idempotent(required=True, fields=("items", "payment_method", "note"),
                    redact=("contact.phone",))
        def post(self, request): ...

The handler runs inside the engine's transaction; ``request.idempotency`` (a
:class:`~idempotency.core.keys.ScopedKey`, or None when the request is not idempotent) gives it the
``business_key`` to store under a business table's own unique constraint.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from functools import partial, wraps
from typing import Any, Literal
from urllib.parse import urlsplit

from asgiref.sync import async_to_sync, iscoroutinefunction
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError
from django.http import HttpResponse, QueryDict
from django.urls import resolve
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.views import APIView

from idempotency.core import engine
from idempotency.core.conf import Policy, engine_setting, field_names
from idempotency.core.redaction import check_paths
from idempotency.web.errors import NESTED_TOO_DEEPLY
from idempotency.web.http import (
    KEY_HEADER,
    business_payload,
    first_parameter,
    prepare,
    refuse_async,
)

Handler = Callable[..., HttpResponse]
Recall = Callable[[APIView, Request], HttpResponse | None]
_NOT_A_HANDLER = (
    "@idempotent decorates a handler method of a DRF APIView (def post(self, request)), not "
    "{name}, a plain function view (or a DRF @api_view function): make it an APIView's "
    "method, or use @idempotent_form for a plain Django view"
)
_A_CLASS = (
    "@idempotent decorates a handler method of a DRF APIView (def post(self, request)), not "
    "the class {name}: decorate the handler whose calls it makes once"
)
_THROUGH_METHOD_DECORATOR = (
    "@idempotent goes directly on a handler method of a DRF APIView (def post(self, request)), "
    "not through method_decorator(idempotent(...)){name}: it needs the view the handler is "
    "called on, which method_decorator keeps from it; drop the method_decorator"
)
_NOT_GIVEN_A_REQUEST = (
    "@idempotent decorates a handler method of a DRF APIView, called with the request "
    "(def post(self, request), a viewset's create or action), not {name}, called with "
    "{given}: decorate the handler that receives the request"
)


def idempotent(
    *,
    required: bool = False,
    fields: Sequence[str] | None = None,
    ttl_seconds: int | None = None,
    auto_key_window: int | None = None,
    in_flight: Literal["reject", "wait"] = "reject",
    wait_seconds: float = 2.0,
    redact: Sequence[str] = (),
    recall: Recall | None = None,
) -> Callable[[Handler], Handler]:
    """Make a DRF handler idempotent; see :class:`idempotency.core.conf.Policy` for the options.
    A malformed option (a ``redact`` path, ``fields`` given as one string, a TTL that is not a
    positive number) is a ``ValueError`` at import time, not at the first request.

    ``recall(view, request)``: for a view whose business rows remember the key they were made
    with (``request.idempotency.business_key`` under a unique constraint), the answer to give,
    or None, when a pre-issued token comes back that Redis no longer knows and whose record is
    gone (kept past the retention): without it the token is refused 422
    ``IDEMPOTENCY_TOKEN_UNKNOWN``, "take a new token", which would do the work again. It may
    raise what the view's ``handle_exception`` answers."""
    policy = Policy(
        required=required,
        fields=field_names(fields),
        ttl_seconds=ttl_seconds,
        auto_key_window=auto_key_window,
        in_flight=in_flight,
        wait_seconds=wait_seconds,
        redact=check_paths(redact),
    )

    def decorate(handler: Handler) -> Handler:
        if isinstance(handler, type):  # on the view class, it replaced it by a function
            raise ImproperlyConfigured(_A_CLASS.format(name=handler.__qualname__))
        refuse_async(handler, decorator="@idempotent")
        if _from_method_decorator(handler):
            raise ImproperlyConfigured(_THROUGH_METHOD_DECORATOR.format(name=_named(handler)))
        if first_parameter(handler) == "request":
            raise ImproperlyConfigured(_NOT_A_HANDLER.format(name=handler.__qualname__))

        @wraps(handler)
        def wrapper(view: APIView, *args: Any, **kwargs: Any) -> HttpResponse:
            if not isinstance(view, APIView):  # a function view whose request is not so named
                raise ImproperlyConfigured(_NOT_A_HANDLER.format(name=handler.__qualname__))
            if not args or not isinstance(args[0], Request):  # perform_create(self, serializer)
                raise ImproperlyConfigured(
                    _NOT_GIVEN_A_REQUEST.format(
                        name=handler.__qualname__,
                        given=type(args[0]).__name__ if args else "no argument",
                    )
                )
            return protected(view, *args, **kwargs)

        def protected(view: APIView, request: Request, *args: Any, **kwargs: Any) -> HttpResponse:
            if getattr(request, "idempotency", None) is not None:
                # Called by another decorated handler of this request (a ModelViewSet's
                # partial_update calls its update): that handler's claim and transaction
                # already cover this call. Claimed again, the key would be this call's with
                # other arguments (``partial``): a 422 kept for the key, or an IntegrityError.
                return handler(view, request, *args, **kwargs)
            request.idempotency = None
            if not engine_setting("ENABLED"):
                return handler(view, request, *args, **kwargs)
            # request.data raises ParseError for a bad body: DRF answers 400 INVALID_JSON.
            payload = business_payload(
                _request_data(request), policy.fields, kwargs, with_files=bool(request.FILES)
            )
            prepared = prepare(
                request,
                policy=policy,
                payload=payload,
                raw_key=request.META.get(KEY_HEADER),
                render_pointer=lambda url: _render_get(request, url),
                recall=None
                if recall is None
                else lambda: _recalled(view, request, recall, args, kwargs),
            )
            if prepared is None:
                return handler(view, request, *args, **kwargs)
            if isinstance(prepared, HttpResponse):
                return prepared
            request.idempotency = prepared.scoped
            return engine.process(prepared, lambda: _run_view(view, request, handler, args, kwargs))

        wrapper.idempotency_policy = policy  # type: ignore[attr-defined]
        return wrapper

    return decorate


def _request_data(request: Request) -> Any:
    """``request.data``, with a body nested deeper than the parser can recurse answered as the
    parse error it is: DRF's JSON parser turns ``ValueError`` into ``ParseError`` (a 400) but
    lets ``RecursionError`` through, and the decorator, which reads the body before the view
    runs, turned it into a 500 and a traceback."""
    try:
        return request.data
    except RecursionError:
        raise exceptions.ParseError(NESTED_TOO_DEEPLY) from None


def _from_method_decorator(handler: Handler) -> bool:
    """Whether Django's ``method_decorator`` handed ``handler`` over: when the class is made, a
    stand-in of its own (``dummy``), and at each call the method bound to its view, as a
    ``partial``. Either way the decorated callable is never called with the view, so this is
    refused when the class is defined, not with a 500 at its first request."""
    if isinstance(handler, partial):
        return True
    return handler.__module__ == "django.utils.decorators" and handler.__name__ == "dummy"


def _named(handler: Handler) -> str:
    """`` on <method>`` when ``handler`` names its method (at a call; when the class is made,
    method_decorator hands over a stand-in that names none)."""
    name = getattr(handler, "__qualname__", "")
    return "" if not name or getattr(handler, "__name__", "") == "dummy" else f" on {name}"


def _run_view(
    view: APIView, request: Request, handler: Handler, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> HttpResponse:
    """Run the handler and render its answer (errors included) inside the transaction, so the
    engine can store the exact bytes. Unexpected exceptions propagate (and become a 500)."""
    try:
        response = handler(view, request, *args, **kwargs)
    except DatabaseError:
        # The transaction is unusable: nothing can be recorded in it, so the engine releases
        # the key, and DRF answers the error outside (a refusal it maps, else a 500).
        raise
    except Exception as exc:
        response = view.handle_exception(exc)
    response = view.finalize_response(request, response, *args, **kwargs)
    if hasattr(response, "render"):
        response.render()
    return response


def _recalled(
    view: APIView, request: Request, recall: Recall, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> HttpResponse | None:
    """The view's answer for a key it remembers, rendered as the view renders its own."""
    try:
        response = recall(view, request)
    except Exception as exc:
        response = view.handle_exception(exc)
    if response is None:
        return None
    response = view.finalize_response(request, response, *args, **kwargs)
    if hasattr(response, "render"):
        response.render()
    return response


def _render_get(request: Request, url: str) -> HttpResponse | None:
    """GET ``url`` in-process as the same caller (same credentials), for pointer replays;
    None for another site's URL, whose path may name an unrelated resource here. A path this
    site does not serve raises ``Resolver404`` (the replay then answers without the body).

    A site served under a prefix (``SCRIPT_NAME``, e.g. ``/app``) names its resources with it,
    as ``reverse()`` does; the URLconf resolves the path after it, so the prefix is taken off
    (a path outside it is not this site's). The URL's query string is the GET's. A resource
    an ``async def`` view serves is rendered too: the view is run to its response."""
    parts = urlsplit(url)
    if parts.netloc and parts.netloc != request.get_host():
        return None
    # the prefix as Django read it for this request ("" at the root)
    script_name = request.path.removesuffix(request.path_info)
    if not parts.path.startswith(f"{script_name}/"):
        return None
    get = copy.copy(request._request)
    get.method = "GET"
    get.path = parts.path
    get.path_info = parts.path.removeprefix(script_name)
    # the resource is the URL's, query string included, not the create's own query string
    get.GET = QueryDict(parts.query)
    get.META = {**get.META, "QUERY_STRING": parts.query}
    match = resolve(get.path_info)
    view = match.func
    if iscoroutinefunction(view):
        # an ``async def`` view returns a coroutine: run it to its response (a 500 at every
        # retry, "'coroutine' object has no attribute 'streaming'", when it was not)
        view = async_to_sync(view)
    response = view(get, *match.args, **match.kwargs)
    if hasattr(response, "render"):
        response.render()
    return response

"""Plain-Django integration: ``@idempotent_form`` makes a form-handling view apply once.

Each rendered form carries a one-time token in a hidden field (``{% idempotency_field %}``
renders it). A double click, a re-submit of a page the browser kept, or the same page's form in
two tabs reach the view with the same token: the first submit runs, the others get the first
answer (usually a redirect) and a notice that the action was already applied. A page rendered
anew (a reload, or "back" to a page sent with ``no-store``) holds a new token: a new action.
A form without a token still gets the automatic key (same user, same fields, within the
window), so even a hand-built POST cannot apply twice by a double click.

What the engine refuses (a token reused with other values, a malformed or foreign token, a
first submit still running) is not shown to a person as the API's JSON problem: they are sent
back to the form's page (303) with a message saying what happened, to submit it anew. The
form's page is the one the browser says it posted from (``Referer``, on this site): a form
often posts to a URL of its own that only takes POST, and a redirect there showed a blank 405.
A browser that sends no ``Referer`` (a privacy setting, ``Referrer-Policy: no-referrer``) is
sent to the page the view names (``form_page``), else back to the URL it posted to.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import partial, wraps
from typing import Any

from django.contrib import messages
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import resolve_url
from django.template.response import SimpleTemplateResponse
from django.utils.functional import Promise
from django.utils.http import url_has_allowed_host_and_scheme
from rest_framework.request import Request
from rest_framework.views import APIView

from idempotency.core import engine, responses
from idempotency.core.conf import Policy, engine_setting, field_names
from idempotency.core.error_codes import IdempotencyErrorCode
from idempotency.web.http import (
    KEY_HEADER,
    business_payload,
    first_parameter,
    prepare,
    refuse_async,
)

FORM_FIELD = "idempotency_key"
ALREADY_APPLIED = "This was already submitted; showing the result of the first submit."
_AGAIN = "Here it is again: submit it anew."
_NOT_VALID = f"This form's token is not valid, so nothing was done. {_AGAIN}"
# What a person is told when the engine refuses a form's submit, by the problem's code; other
# codes (a rate limit, tokens unavailable) keep their problem answer
REFUSED = {
    IdempotencyErrorCode.KEY_REUSED: "This form was already submitted with other values, so "
    f"nothing was done now. {_AGAIN}",
    IdempotencyErrorCode.KEY_INVALID: _NOT_VALID,
    # a key shaped like a pre-issued API token ("tok_…"): a form never carries one
    IdempotencyErrorCode.TOKEN_INVALID: _NOT_VALID,
    IdempotencyErrorCode.TOKEN_UNKNOWN: _NOT_VALID,
    IdempotencyErrorCode.TOKEN_USED: _NOT_VALID,
    IdempotencyErrorCode.IN_PROGRESS: "This form's first submit is still being applied. "
    "Reload in a moment to see it.",
    # text the fingerprint cannot put in one form: more than 30 combining marks in a row, or
    # two fields whose names differ only in their Unicode form
    IdempotencyErrorCode.PAYLOAD_INVALID: "This form holds text that cannot be read one way "
    f"only (more than 30 accents or other combining marks in a row), so nothing was done. {_AGAIN}",
}

View = Callable[..., HttpResponse]
_A_METHOD = (
    "@idempotent_form decorates a view function (def add_note(request)), not {name}, a method "
    "of a class-based view: decorate it with @method_decorator(idempotent_form(...))"
)
# Beneath DRF's @api_view the view is handed DRF's Request: its body is DRF's to parse and
# its errors DRF's to answer, so it is a DRF view, for @idempotent on an APIView's handler;
# over it, the request is not authenticated yet (DRF does that inside the view)
_A_DRF_VIEW = (
    "@idempotent_form decorates a plain Django view, not {name}, a DRF view (an @api_view "
    "function or an APIView): make it an APIView whose handler (def post(self, request)) is "
    "decorated with @idempotent"
)
_A_CLASS = (
    "@idempotent_form decorates a view function (def add_note(request)), not the class {name}: "
    "decorate its post with @method_decorator(idempotent_form(...))"
)
# Where a refused form goes when the browser did not say where it posted from: a URL name or a
# path (``resolve_url``), or a callable given the view's request and arguments
FormPage = str | Promise | Callable[..., str]
# Each decorated view's ``form_page`` given as a name or path, with the view's name: a name no
# URL has would fail only when a refused form arrives without a ``Referer``, as a 500, so
# ``idempotency.checks.check_form_pages`` resolves them all when the URLconf is loaded.
NAMED_FORM_PAGES: list[tuple[str, str | Promise]] = []


def idempotent_form(
    *,
    fields: Sequence[str] | None = None,
    auto_key_window: int = 60,
    notice: str = ALREADY_APPLIED,
    form_page: FormPage | None = None,
) -> Callable[[View], View]:
    """Decorate a view whose POST changes state. GET (and other safe methods) pass through.

    ``fields``: the POST fields that define the action (None: all but the CSRF token and the
    idempotency token). Duplicates in flight wait for the first (2 s), as a person would.
    ``form_page``: the page showing the form, for a view that takes only POST (a URL name, a
    path, or a callable given the view's request and arguments); None: the URL posted to.
    """
    policy = Policy(
        fields=field_names(fields),
        auto_key_window=auto_key_window,
        in_flight="wait",
        # a refused form (its page with the errors) changed nothing; kept, it would hold the
        # user's CSRF token for its lifetime, and the corrected form, sent with the same form
        # key, would be refused as the key reused with other values
        keep_refusals=False,
    )

    def decorate(view: View) -> View:
        if isinstance(view, type):  # a class-based view: its as_view() is the view
            raise ImproperlyConfigured(_A_CLASS.format(name=view.__qualname__))
        if _is_drf_view(view):  # over DRF's @api_view (or an APIView's as_view())
            raise ImproperlyConfigured(_A_DRF_VIEW.format(name=view.__qualname__))
        refuse_async(view, decorator="@idempotent_form")
        if first_parameter(view) == "self":
            raise ImproperlyConfigured(_A_METHOD.format(name=view.__qualname__))
        if isinstance(form_page, str | Promise):  # a lazy one: reverse_lazy("note-list")
            NAMED_FORM_PAGES.append((f"{view.__module__}.{view.__qualname__}", form_page))
        elif form_page is not None and not callable(form_page):
            # it would be read only when a refused form arrives without a Referer: a 500
            raise ImproperlyConfigured(
                f"@idempotent_form's form_page of {view.__qualname__} must be a URL name, a "
                f"path or a callable given the view's request and arguments, not {form_page!r}"
            )

        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if isinstance(request, Request):  # beneath DRF's @api_view
                raise ImproperlyConfigured(_A_DRF_VIEW.format(name=view.__qualname__))
            if not isinstance(request, HttpRequest):  # a method whose self is not so named
                raise ImproperlyConfigured(_A_METHOD.format(name=view.__qualname__))
            request.idempotency = None
            if request.method != "POST" or not engine_setting("ENABLED"):
                return view(request, *args, **kwargs)
            data = {
                k: request.POST.getlist(k) if len(request.POST.getlist(k)) > 1 else v
                for k, v in request.POST.items()
                if k not in {"csrfmiddlewaretoken", FORM_FIELD}
            }
            # a file is part of the action: the form sent again with another one is the key
            # reused with other values, not a replay of the first upload
            data.update(
                (k, files if len(files) > 1 else files[0]) for k, files in request.FILES.lists()
            )
            body = _unread_body(request)
            raw_key = request.POST.get(FORM_FIELD) or request.META.get(KEY_HEADER)
            prepared = prepare(
                request,
                policy=policy,
                payload=business_payload(
                    data if body is None else body,
                    policy.fields,
                    kwargs,
                    with_files=bool(request.FILES),
                ),
                raw_key=raw_key,
            )
            if prepared is None:
                return view(request, *args, **kwargs)
            back = partial(_form_page, request, form_page, args, kwargs)
            if isinstance(prepared, HttpResponse):
                return _back_to_the_form(request, prepared, back)
            request.idempotency = prepared.scoped
            response = engine.process(prepared, lambda: _rendered(view(request, *args, **kwargs)))
            if response.get(responses.RESULT_HEADER) == "HIT":
                # a notice when the host uses the messages framework; the replay either way
                messages.info(request, notice, fail_silently=True)
            return _back_to_the_form(request, response, back)

        wrapper.idempotency_policy = policy  # type: ignore[attr-defined]
        return wrapper

    return decorate


def _is_drf_view(view: View) -> bool:
    """Whether ``view`` is DRF's: ``@api_view`` and ``APIView.as_view()`` both answer with a
    function carrying the view class (``cls``). Decorated over one, the form decorator would
    see the request before DRF authenticates it: a caller with a token or an API key is then
    no one to Django, the request has no scope, and it ran unprotected, with no warning."""
    cls = getattr(view, "cls", None)
    return isinstance(cls, type) and issubclass(cls, APIView)


# The bodies Django reads fields from (``request.POST``, ``request.FILES``)
FORM_CONTENT_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data"})


def _unread_body(request: HttpRequest) -> bytes | None:
    """A body Django reads no fields from (JSON a page's script posts, a form sent as
    ``text/plain``), which then counts whole (as its SHA-256, ``business_payload``), as a DRF
    body that is no object does; None for a form's body or none. Fingerprinted by its fields,
    every such body was the same empty form: another create within the automatic key's
    window, or under the same key, was replayed the first one's answer and never ran.
    ``request.body`` stays readable by the view, and is bounded by
    ``DATA_UPLOAD_MAX_MEMORY_SIZE`` as the view's own read is."""
    if request.content_type in FORM_CONTENT_TYPES:
        return None
    return request.body or None


def _rendered(response: HttpResponse) -> HttpResponse:
    """The view's answer with its bytes: a ``TemplateResponse`` (a generic ``CreateView`` or
    ``FormView`` answers an invalid form with one) is rendered by Django only after the view
    returned, too late for the engine, which keeps those bytes in its transaction. Rendered
    here, a ``process_template_response`` middleware gets it already rendered."""
    if isinstance(response, SimpleTemplateResponse):
        response.render()
    return response


def _back_to_the_form(
    request: HttpRequest, response: HttpResponse, back: Callable[[], str]
) -> HttpResponse:
    """``response``, unless it is the engine's own refusal (a problem+json): then a redirect
    to the form's page (``back()``), with the refusal in words (when the host uses messages)."""
    if response.get("Content-Type") != "application/problem+json":
        return response
    text = REFUSED.get(json.loads(response.content).get("code"))
    if text is None:
        return response
    messages.error(request, text, fail_silently=True)
    return HttpResponseRedirect(back(), status=303)


def _form_page(
    request: HttpRequest, named: FormPage | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> str:
    """The page the form was posted from: the ``Referer`` when it is this site's, else the
    view's ``form_page``, else the URL posted to."""
    referer = same_site_referer(request)
    if referer is not None:
        return referer
    if callable(named):
        return named(request, *args, **kwargs)
    if named is not None:
        return resolve_url(named)
    return request.get_full_path()


def same_site_referer(request: HttpRequest) -> str | None:
    """The page the browser says the request came from (``Referer``), when it is one of this
    site's (its host, and HTTPS when the request is); else ``None``. Anyone can write the
    header, so it is only ever a page to send the person back to."""
    referer = request.META.get("HTTP_REFERER", "")
    if referer and url_has_allowed_host_and_scheme(
        referer, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return referer
    return None

"""The system check of ``@idempotent_form``'s pages (``manage.py check``, and every process that
runs the checks as it starts)."""

from __future__ import annotations

from typing import Any

from asgiref.sync import iscoroutinefunction
from django.core.checks import CheckMessage, Error, Tags, register
from django.shortcuts import resolve_url
from django.urls import NoReverseMatch, URLResolver, get_resolver
from django.utils.functional import Promise

from idempotency.web import forms


@register(Tags.urls)
def check_form_pages(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every ``@idempotent_form(form_page=...)`` given as a name or path resolves to a URL.
    A name no URL has would fail only when a refused form arrives without a ``Referer`` (a
    browser's privacy setting), as a server error in place of the page with its message."""
    try:
        _ = get_resolver().url_patterns  # imports the views, whose decorators list their pages
    except Exception:  # a URLconf that does not load: Django's own URL checks name that
        return []
    messages: list[CheckMessage] = []
    for view, page in forms.NAMED_FORM_PAGES:
        try:
            resolve_url(page)
        except NoReverseMatch:
            messages.append(
                Error(
                    f"@idempotent_form(form_page={_given(page)}) of {view} names no URL",
                    hint="give the name of a URL pattern without arguments, a path, or a "
                    "callable given the view's request and arguments",
                    id="idempotency.E006",
                )
            )
    return messages


@register(Tags.urls)
def check_async_class_based_form_views(
    app_configs: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """No class-based view served by a URL has an ``async def`` handler under
    ``@method_decorator(idempotent_form(...))``. ``method_decorator`` applies the decorator
    at each call (when the class is made it hands over a sync stand-in), so the refusal of an
    async view that a function view gets when its module is imported came only at the first
    POST, as a 500 at every one."""
    try:
        patterns = get_resolver().url_patterns
    except Exception:  # a URLconf that does not load: Django's own URL checks name that
        return []
    return [
        Error(
            f"@idempotent_form of {view_class.__qualname__}.{method} ({route}) decorates an "
            "async view: the engine protects sync views only (def, not async def), and every "
            "POST would fail with a 500",
            hint="make the handler a def, or leave it undecorated",
            id="idempotency.E009",
        )
        for route, view_class in _class_based_views(patterns, prefix="")
        for method in view_class.http_method_names
        if getattr(getattr(view_class, method, None), "idempotency_policy", None) is not None
        and iscoroutinefunction(getattr(view_class, method))
    ]


def _class_based_views(patterns: list[Any], *, prefix: str) -> list[tuple[str, type]]:
    """(route, class) of every class-based view (``as_view()``) the URL patterns serve."""
    found: list[tuple[str, type]] = []
    for pattern in patterns:
        route = f"{prefix}{pattern.pattern}"
        if isinstance(pattern, URLResolver):
            found.extend(_class_based_views(pattern.url_patterns, prefix=route))
        elif isinstance(getattr(pattern.callback, "view_class", None), type):
            found.append((route, pattern.callback.view_class))
    return found


def _given(page: str | Promise) -> str:
    """The ``form_page`` as the decorator was given it; a ``reverse_lazy()`` by its URL name
    (the first argument lazy()'s proxy keeps), not as a proxy object's repr."""
    if not isinstance(page, Promise):
        return repr(page)
    args = getattr(page, "_args", ())
    return f"reverse_lazy({args[0]!r})" if args else repr(page)

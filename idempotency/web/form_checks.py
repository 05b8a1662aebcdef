"""The system check of ``@idempotent_form``'s pages (``manage.py check``, and every process that
runs the checks as it starts)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Tags, register
from django.shortcuts import resolve_url
from django.urls import NoReverseMatch, get_resolver
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


def _given(page: str | Promise) -> str:
    """The ``form_page`` as the decorator was given it; a ``reverse_lazy()`` by its URL name
    (the first argument lazy()'s proxy keeps), not as a proxy object's repr."""
    if not isinstance(page, Promise):
        return repr(page)
    args = getattr(page, "_args", ())
    return f"reverse_lazy({args[0]!r})" if args else repr(page)

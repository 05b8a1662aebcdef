"""Sessions, Django's user and flash messages for browser pages only, not for the API.

The API authenticates every call by its ``Authorization`` header (``tenants.authentication``)
and never reads a cookie session, a Django user or a flash message. Django's session,
authentication and message middleware would still build a session store, a lazy user and a
message storage (a cookie and a session backend) for each API call, and look at them again on
the way out. These subclasses pass ``/api/`` paths straight through and behave exactly like
Django's own everywhere else (the dashboard, the admin, the login pages).

CSRF protection is untouched: ``CsrfViewMiddleware`` stays in the stack for every path (DRF
views are CSRF-exempt by themselves; the dashboard's forms keep their token check).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.middleware import AuthenticationMiddleware as DjangoAuthentication
from django.contrib.messages.middleware import MessageMiddleware as DjangoMessages
from django.contrib.sessions.middleware import SessionMiddleware as DjangoSessions
from django.http import HttpRequest

from config.api_error_pages import is_api_path


class BrowserOnly:
    """Mixin for a ``MiddlewareMixin`` subclass: skip its work on API paths."""

    get_response: Any

    def __call__(self, request: HttpRequest) -> Any:
        if is_api_path(request):
            return self.get_response(request)
        return super().__call__(request)  # type: ignore[misc]


class SessionMiddleware(BrowserOnly, DjangoSessions):
    pass


class AuthenticationMiddleware(BrowserOnly, DjangoAuthentication):
    pass


class MessageMiddleware(BrowserOnly, DjangoMessages):
    pass

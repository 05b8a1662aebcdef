"""Where an account whose password someone else set may go: only to choose its own
(``tenants/temporary_passwords.py`` says why and marks such accounts)."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode

from django.contrib import messages
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from config.database_unavailable import outage_answer
from tenants.temporary_passwords import to_replace

# the pages a marked account may still reach: the one to choose its password, and the ways out
OPEN_PAGES = ("dash-password", "logout", "admin:logout")


class TemporaryPasswordMiddleware:
    """A signed-in account whose password is to be replaced reaches only :data:`OPEN_PAGES`;
    any other page (a form's POST included, which does nothing) sends it to choose a password,
    and back to where it was going once it has.

    Read from the database on each signed-in browser request rather than kept in the session:
    staff setting a password ends the account's sessions (Django's session hash), but a mark
    kept in a session would outlive a mark removed or added by other means. API calls never
    carry a signed-in user (``config.browser_middleware``), so they pass straight through.

    It reads the database before any view runs (the session, the user, the mark), outside
    what ``config.database_unavailable`` is handed: with PostgreSQL unreachable it answers that
    middleware's 503 itself, not a 500."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self._open: frozenset[str] | None = None

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            marked = self._marked(request)
        except DatabaseError as exc:  # the session, the user or the mark unread: the outage page
            answer = outage_answer(request, exc)
            if answer is None:
                raise
            return answer
        if not marked:
            return self.get_response(request)
        page = reverse("dash-password")
        if request.method in ("GET", "HEAD"):
            return HttpResponseRedirect(f"{page}?{urlencode({'next': request.get_full_path()})}")
        messages.warning(request, "Nothing was done: choose your own password first.")
        return HttpResponseRedirect(page, status=303)

    def _marked(self, request: HttpRequest) -> bool:
        user = getattr(request, "user", None)
        if user is None or request.path in self._open_paths():
            return False
        return bool(user.is_authenticated) and to_replace(user)

    def _open_paths(self) -> frozenset[str]:
        if self._open is None:  # reversed on first use: the URLconf is not loaded at start
            self._open = frozenset(reverse(name) for name in OPEN_PAGES)
        return self._open

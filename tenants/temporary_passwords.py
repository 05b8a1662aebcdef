"""A password someone else set is temporary: it lets its holder in only to choose their own.

Accounts are made by platform staff (the Django admin's "Add user" takes a password) and by the
operator (``onboard_tenant``, then ``changepassword``), and staff give a member a new password
when they lose theirs. Whoever typed that password knows it, and with it could sign in as the
member later, with the member's role, unseen. So such an account is marked
(:class:`~tenants.models.PasswordToReplace`) and, while marked, every dashboard and admin page
sends it to the page where its holder chooses a password of their own (``dash-password``),
which must differ from the one they were given; choosing it removes the mark.

Only a person setting another's password marks it: a password set in code (the demo's seed,
tests) or by its holder is theirs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from tenants.models import PasswordToReplace

# the pages a marked account may still reach: the one to choose its password, and the ways out
OPEN_PAGES = ("dash-password", "logout", "admin:logout")


def set_by_another(user: Any) -> None:
    """``user``'s password was just set by someone else: it is to be replaced."""
    PasswordToReplace.objects.get_or_create(user_id=user.pk)


def chosen_by_holder(user: Any) -> None:
    """``user`` chose their own password (or has none anyone could know): nothing to replace."""
    PasswordToReplace.objects.filter(user_id=user.pk).delete()


def to_replace(user: Any) -> bool:
    return PasswordToReplace.objects.filter(user_id=user.pk).exists()


class TemporaryPasswordMiddleware:
    """A signed-in account whose password is to be replaced reaches only :data:`OPEN_PAGES`;
    any other page (a form's POST included, which does nothing) sends it to choose a password,
    and back to where it was going once it has.

    Read from the database on each signed-in browser request rather than kept in the session:
    staff setting a password ends the account's sessions (Django's session hash), but a mark
    kept in a session would outlive a mark removed or added by other means. API calls never
    carry a signed-in user (``config.browser_middleware``), so they pass straight through."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self._open: frozenset[str] | None = None

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated or request.path in self._open_paths():
            return self.get_response(request)
        if not to_replace(user):
            return self.get_response(request)
        page = reverse("dash-password")
        if request.method in ("GET", "HEAD"):
            return HttpResponseRedirect(f"{page}?{urlencode({'next': request.get_full_path()})}")
        messages.warning(request, "Nothing was done: choose your own password first.")
        return HttpResponseRedirect(page, status=303)

    def _open_paths(self) -> frozenset[str]:
        if self._open is None:  # reversed on first use: the URLconf is not loaded at start
            self._open = frozenset(reverse(name) for name in OPEN_PAGES)
        return self._open

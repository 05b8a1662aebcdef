"""The page a form refused by the CSRF check leads to (``CSRF_FAILURE_VIEW``).

Signing in rotates the CSRF secret, so every other tab's form shown before it carries a token
of the old one. When the session ends with several tabs open, each shows the sign-in page;
the person signs in in one, and the next sign-in form they submit, in another tab, is refused.
They are signed in: that form is sent on to the page it was to lead to, saying as whom,
instead of "This form has expired… cookies are blocked", whose "reload" sent the stale form
again. Any other refusal keeps Django's answer, with the site's ``403_csrf.html``.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views import csrf


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """A stale sign-in form of a person signed in already goes on to its page; else 403."""
    user = getattr(request, "user", None)
    if (
        request.method == "POST"
        and request.path == reverse("login")
        and user is not None
        and user.is_authenticated
    ):
        messages.info(
            request,
            f"You are signed in already as {user.get_username()} (in another tab); nothing "
            "else was done. To sign in as someone else, log out first.",
            fail_silently=True,
        )
        return HttpResponseRedirect(_next_page(request))
    return csrf.csrf_failure(request, reason)


def _next_page(request: HttpRequest) -> str:
    """The sign-in form's ``next`` when it is a page of this site, else the dashboard."""
    next_page = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(
        next_page, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return next_page
    return settings.LOGIN_REDIRECT_URL

"""Signing out of the dashboard ends on its sign-in page, saying so.

Django's ``LogoutView`` without a next page renders ``registration/logged_out.html``, which in
this project is the admin's ("Logged out | Django site admin", a link back into the admin): a
merchant signing out landed in the staff's site.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse


class LogoutView(auth_views.LogoutView):
    next_page = "login"

    def post(self, request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        response = super().post(request, *args, **kwargs)
        messages.info(request, "You are signed out.", fail_silently=True)
        return response

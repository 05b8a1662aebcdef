"""The current password the password pages ask for, checked as a sign-in checks one.

The dashboard's password page and the admin's ask a signed-in account for its current password
before taking a new one: that is what keeps whoever holds a session (a browser left open, a
copied cookie) from making the account theirs. Django's ``PasswordChangeForm`` compares it with
``check_password``, outside the login lockout, so that holder could try any number of passwords
there, from an address the lockout had refused, and learn the one that opens the account
anywhere. Here each password the page checks is a sign-in attempt of that account from the
request's address (:func:`config.login_throttle.address_turn`, django-axes): a wrong one is
recorded as a failed login, a right one clears the account's failures from the address as a
successful login does, and while the pair or the address is locked out none is checked and the
page answers with the lockout (429).
"""

from __future__ import annotations

from typing import Any

from django.contrib.admin.forms import AdminPasswordChangeForm
from django.contrib.auth import authenticate
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.views import PasswordChangeView
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from config.login_throttle import address_turn, clear_failures_of


def is_password_of(request: HttpRequest, user: AbstractBaseUser, password: str) -> bool:
    """Whether ``password`` is ``user``'s, asked as a sign-in from ``request``'s address.

    The answer is read after the turn's commit, so the failure axes recorded is kept; a right
    one clears the account's failures from the address, as a successful sign-in does."""
    with address_turn(request):
        found = authenticate(request, username=user.get_username(), password=password)
        right = found is not None and found.pk == user.pk
        if right:
            clear_failures_of(request, user.get_username())
    return right


class ThrottledCurrentPassword:
    """A ``PasswordChangeForm`` whose current password is checked by :func:`is_password_of`;
    built with the ``request`` (:class:`RequestInForm` passes it)."""

    user: AbstractBaseUser
    cleaned_data: dict[str, Any]
    error_messages: dict[str, str]

    def __init__(self, *args: Any, request: HttpRequest, **kwargs: Any) -> None:
        self.request = request
        super().__init__(*args, **kwargs)

    def clean_old_password(self) -> str:
        old_password = self.cleaned_data["old_password"]
        if not is_password_of(self.request, self.user, old_password):
            raise ValidationError(
                self.error_messages["password_incorrect"], code="password_incorrect"
            )
        return old_password


class RequestInForm(PasswordChangeView):
    """Django's password change view, handing the request to its form."""

    def get_form_kwargs(self) -> dict[str, Any]:
        return {**super().get_form_kwargs(), "request": self.request}


class StaffPasswordChangeForm(ThrottledCurrentPassword, AdminPasswordChangeForm):
    """The admin's "Change password" form (``config.admin_site``)."""

"""The dashboard's and the admin's login forms, with the username's length checked.

Django's ``AuthenticationForm`` writes the user model's limit on usernames (150 characters)
into the page but does not check it: a longer one went on to authentication, where the login
throttle (django-axes) records the failed attempt in a 255-character column, and the database's
refusal answered anyone, signed in or not, with a 500 and a traceback in the log. A username no
account can have is now the form's error, and nothing is authenticated or recorded.

Both forms check the password in the sign-in's turn from its address
(:func:`config.login_throttle.address_turn`), so guesses sent at once meet the lockout.
"""

from __future__ import annotations

from typing import Any

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator

from config.login_throttle import address_turn


class BoundedUsername:
    """Checks the username against the limit the form already knows (``max_length``)."""

    fields: dict[str, Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        username = self.fields["username"]
        username.validators.append(MaxLengthValidator(username.max_length))


class InTurn:
    """Authenticates in the turn of the request's address. A refused password is the form's
    error raised after the turn's commit: raised inside it, it rolled back the failure that
    the login throttle had recorded."""

    request: Any

    def clean(self) -> dict[str, Any]:
        if self.request is None:
            return super().clean()  # type: ignore[misc]
        with address_turn(self.request):
            try:
                return super().clean()  # type: ignore[misc]
            except ValidationError as error:
                refused = error
        raise refused


class LoginForm(BoundedUsername, InTurn, AuthenticationForm):
    """The dashboard's login."""


class StaffLoginForm(BoundedUsername, InTurn, AdminAuthenticationForm):
    """The admin's login (staff accounts only, as Django's)."""

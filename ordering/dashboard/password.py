"""Choosing one's own password: any signed-in account, a restaurant's member or platform staff.

The page every account whose password someone else set is sent to until it has chosen its own
(``tenants/temporary_passwords.py``), and where anyone changes theirs. The new password must
differ from the current one: otherwise whoever set a temporary password would know it still.
Every password the page checks counts as a sign-in attempt (``tenants/password_forms.py``).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import PasswordChangeForm
from django.http import HttpResponse, HttpResponseRedirect

from tenants.password_forms import RequestInForm, ThrottledCurrentPassword
from tenants.temporary_passwords import chosen_by_holder, to_replace

ALREADY_CHANGED = "Your password is already changed."
# Set in the session by a change made in it, taken by the next refused form of that session
JUST_CHANGED = "password_just_changed"


class OwnPasswordForm(ThrottledCurrentPassword, PasswordChangeForm):
    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        password = cleaned.get("new_password2")
        if password and "old_password" not in self.errors and self.user.check_password(password):
            self.add_error(
                "new_password2",
                forms.ValidationError(
                    "Choose a password other than your current one.", code="password_unchanged"
                ),
            )
        return cleaned


class OwnPasswordView(auth_views.RedirectURLMixin, RequestInForm):
    """Back to the page the account was going to (``next``, this site's only), else the board."""

    form_class = OwnPasswordForm
    template_name = "dashboard/password.html"
    next_page = "board"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return super().get_context_data(
            **kwargs,
            next=self.get_redirect_url(),
            temporary=to_replace(self.request.user),
        )

    def form_valid(self, form: OwnPasswordForm) -> HttpResponse:
        response = super().form_valid(form)
        chosen_by_holder(form.user)
        self.request.session[JUST_CHANGED] = True
        messages.success(self.request, "Your password is changed.")
        return response

    def form_invalid(self, form: OwnPasswordForm) -> HttpResponse:
        """The same form sent twice (a double click, a retry after a timeout): the first
        changed the password, so the second's current password is wrong while its new one is
        the password now. That is done, not an error to show. Asked only of the first form
        refused after a change made in this session: asked of every form, it tested a second
        password on each request, outside the login lockout."""
        just_changed = self.request.session.pop(JUST_CHANGED, False)
        if (
            just_changed
            and "old_password" in form.errors
            and form.user.check_password(form.data.get("new_password1", ""))
        ):
            messages.info(self.request, ALREADY_CHANGED)
            return HttpResponseRedirect(self.get_success_url())
        return super().form_invalid(form)

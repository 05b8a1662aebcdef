"""The login throttle's failed attempts in the admin: django-axes' own list, with its "Clean up
expired attempts" mended.

axes' action read the time its login handling sets on a request (``axes_attempt_time``),
which an admin page's request does not carry: it answered 500 to everyone. It declared no
permission either, so it was offered to staff who may only view the attempts, and it deletes
them. Here it deletes the attempts the retention purge would (past the lockout's cool-off,
when they no longer lock anything: :func:`tenants.retention.expired_login_attempts`), for
staff who may delete login attempts.
"""

from __future__ import annotations

from axes.admin import AccessAttemptAdmin
from axes.models import AccessAttempt
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from tenants.retention import expired_login_attempts


class LoginAttemptAdmin(AccessAttemptAdmin):
    @admin.action(description="Clean up expired attempts", permissions=["delete"])
    def cleanup_expired_attempts(
        self, request: HttpRequest, queryset: QuerySet[AccessAttempt]
    ) -> None:
        """Every expired attempt, whichever rows were selected (as axes' action did)."""
        count, _ = AccessAttempt.objects.filter(expired_login_attempts(timezone.now())).delete()
        self.message_user(request, f"Cleaned up {count} expired access attempts.", messages.SUCCESS)


def register() -> None:
    """In place of axes' own (``axes`` is listed before this app, so it registered first);
    nothing when axes' admin is turned off (``AXES_ENABLE_ADMIN``)."""
    if admin.site.is_registered(AccessAttempt):
        admin.site.unregister(AccessAttempt)
        admin.site.register(AccessAttempt, LoginAttemptAdmin)

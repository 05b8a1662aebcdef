"""A password someone else set is temporary: it lets its holder in only to choose their own.

Accounts are made by platform staff (the Django admin's "Add user" takes a password) and by the
operator (``onboard_tenant``, then ``changepassword``), and staff give a member a new password
when they lose theirs. Whoever typed that password knows it, and with it could sign in as the
member later, with the member's role, unseen. So such an account is marked
(:class:`~tenants.models.PasswordToReplace`) and, while marked, every dashboard and admin page
sends it to the page where its holder chooses a password of their own (``dash-password``,
``config/temporary_passwords.py``),
which must differ from the one they were given; choosing it removes the mark.

Only a person setting another's password marks it: a password set in code (the demo's seed,
tests) or by its holder is theirs.
"""

from __future__ import annotations

from typing import Any

from tenants.models import PasswordToReplace


def set_by_another(user: Any) -> None:
    """``user``'s password was just set by someone else: it is to be replaced."""
    PasswordToReplace.objects.get_or_create(user_id=user.pk)


def chosen_by_holder(user: Any) -> None:
    """``user`` chose their own password (or has none anyone could know): nothing to replace."""
    PasswordToReplace.objects.filter(user_id=user.pk).delete()


def to_replace(user: Any) -> bool:
    return PasswordToReplace.objects.filter(user_id=user.pk).exists()

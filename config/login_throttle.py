"""The login lockout's limit per client address, across the names tried (django-axes' handler).

django-axes locks one account from one address (``AXES_LOCKOUT_PARAMETERS``): alone, that let
one address try ``LOGIN_FAILURE_LIMIT - 1`` passwords on every account of the site each
cool-off (password spraying). axes compares one failure limit with the largest count of its
lockout parameters, so adding the address alone as a parameter would lock a restaurant's shared
address after five typos of any of its staff, and its reset on a successful login would clear
the address's count whenever the attacker signed in to an account of their own. This handler
keeps the pair's lockout as it is and adds a second, higher limit: the failures recorded from
the address (its axes rows still within the cool-off, whatever the name) reaching
``LOGIN_ADDRESS_FAILURE_LIMIT`` refuse every sign-in from it, answered like the pair's lockout.
A member's failures are deleted when that member signs in (``AXES_RESET_ON_SUCCESS``), so
staff who mistype and then sign in use none of their address's budget.

Both limits are read before a password is checked and the failure is recorded after it, so
requests from one address sent at the same instant all read the count from before any of them
and all checked their password: an address could try as many passwords as the server ran
requests at once past either limit. :func:`address_turn` makes the sign-ins of one address take
their turn.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_credentials
from axes.models import AccessAttempt
from axes.signals import user_locked_out
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Sum
from django.http import HttpRequest, QueryDict

from config.client_address import limited_address_of

# The first of the two 32-bit keys of the sign-ins' advisory locks: PostgreSQL keeps two-key
# locks apart from the one-key locks the idempotency engine's claims take.
_SIGN_IN_LOCKS = 0x5167_4E31


def address_failures(request: HttpRequest) -> int:
    """Failed sign-ins recorded from the request's address (an IPv6 client's /64) within the
    cool-off, across every name tried."""
    recent = AccessAttempt.objects.filter(
        ip_address=request.axes_ip_address,  # type: ignore[attr-defined]
        attempt_time__gte=get_cool_off_threshold(request),
    )
    return recent.aggregate(total=Sum("failures_since_start"))["total"] or 0


@contextmanager
def address_turn(request: HttpRequest) -> Iterator[None]:
    """A transaction in which the sign-in of ``request`` checks the limits, the password and
    records its failure while no other sign-in from its address (an IPv6 client's /64) does:
    they wait for its commit, then read the failure it recorded.

    A transaction-scoped advisory lock (it survives PgBouncer's transaction pooling, and a
    worker killed mid-check lets it go). Addresses whose 32-bit hashes meet only wait for each
    other. SQLite, the embedded demo's single process, takes its writes one at a time already."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            digest = hashlib.blake2b(limited_address_of(request).encode(), digest_size=4).digest()
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_advisory_xact_lock(%s, %s)",
                    [_SIGN_IN_LOCKS, int.from_bytes(digest, "big", signed=True)],
                )
        yield


def address_locked(request: HttpRequest) -> bool:
    return address_failures(request) >= settings.LOGIN_ADDRESS_FAILURE_LIMIT


@contextmanager
def fields_unread(request: HttpRequest | None) -> Iterator[None]:
    """The request shows axes no query string and no form fields while it records a failure.

    axes copied both into the attempt's ``get_data`` and ``post_data`` (a password masked, but
    the CSRF token and whatever else a client sent, up to ``MAX_REQUEST_BYTES``, appended again
    on each failure), none of which docs/data-protection.md names among what the throttle
    keeps: the name typed (from the credentials, not the form), the address and the user agent.
    The login form holds the fields it read, so putting them back afterwards changes nothing
    for it."""
    if request is None:
        yield
        return
    shown = request.GET, request.POST
    request.GET, request.POST = QueryDict(), QueryDict()
    try:
        yield
    finally:
        request.GET, request.POST = shown


def clear_failures_of(request: HttpRequest, username: str) -> None:
    """What a successful sign-in does to the failures of ``username`` from ``request``'s
    address (``AXES_RESET_ON_SUCCESS``), for a password checked right outside the login (the
    password pages' current password): its typos before stay counted otherwise, and the next
    one locks the account's holder out for the cool-off. Called in :func:`address_turn`."""
    if settings.AXES_RESET_ON_SUCCESS:
        AddressLimitedHandler().reset_user_attempts(request, get_credentials(username))


class AddressLimitedHandler(AxesDatabaseHandler):
    """axes' database handler, with the address's limit beside the account-and-address one."""

    def is_locked(self, request: HttpRequest, credentials: dict | None = None) -> bool:
        return super().is_locked(request, credentials) or address_locked(request)

    def user_login_failed(
        self, sender: Any, credentials: dict, request: HttpRequest | None = None, **kwargs: Any
    ) -> None:
        """Records the failure as axes does, but for the request's query string and form
        fields; the failure that fills the address's limit is answered with the lockout, as the
        one that fills the pair's is."""
        with fields_unread(request):
            super().user_login_failed(sender, credentials, request, **kwargs)
        if request is None or request.axes_locked_out or not address_locked(request):  # type: ignore[attr-defined]
            return
        request.axes_locked_out = True  # type: ignore[attr-defined]
        request.axes_credentials = credentials  # type: ignore[attr-defined]
        user_locked_out.send(
            "axes",
            request=request,
            username=credentials.get("username"),
            ip_address=request.axes_ip_address,  # type: ignore[attr-defined]
        )

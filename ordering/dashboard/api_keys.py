"""API keys of the tenant's apps: issue (the full key is shown once), list, revoke.

The new key travels to the next page in the server-side session, never in a URL, a cookie or
the stored idempotent response (a bare redirect): a replayed "create" shows the list and the
"already submitted" notice, not the key. The session keeps each key issued until its page
shows it, by the key's id, and the redirect names that id (``?issued=<id>``): keys issued in
two tabs at once are each shown, named, in the tab that issued it (one slot for all lost the
first key when the second was issued before the first's page loaded).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.contrib import messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from idempotency.web.forms import idempotent_form
from ordering.dashboard.access import found, member_required, render_page, tenant_of
from ordering.dashboard.forms import ApiKeyCreateForm
from ordering.dashboard.retired_rows import Listed, live_and_newest_retired
from tenants.api_keys import ApiKeyLimitReached, issue_api_key, revoke_api_key
from tenants.key_issuers import issuers_who_left, known_by_someone_who_left
from tenants.models import ApiClient, Tenant
from tenants.permissions import Area
from tenants.session_values import change_value

NEW_KEY_SESSION = "dashboard_new_api_key"

T = TypeVar("T")


def clients_of(tenant: Tenant) -> QuerySet[ApiClient]:
    return (
        ApiClient.objects.filter(tenant=tenant)
        .select_related("issued_by")
        .order_by("revoked_at", "name", "pk")
    )


def listed(tenant: Tenant) -> Listed[ApiClient]:
    """The keys as the page lists them (every live one, the newest revoked ones,
    :mod:`ordering.dashboard.retired_rows`), each live secret key whose issuer no longer
    reaches this page marked (``issuer_left``, :mod:`tenants.key_issuers`)."""
    left = issuers_who_left(tenant)
    clients = live_and_newest_retired(
        clients_of(tenant).filter(revoked_at__isnull=True),
        clients_of(tenant).filter(revoked_at__isnull=False).order_by("-revoked_at", "-pk"),
    )
    for client in clients.rows:
        client.issuer_left = known_by_someone_who_left(client, left)
    return clients


@member_required(Area.API_KEYS)
@require_http_methods(["GET", "HEAD", "POST"])
@idempotent_form(fields=("name", "kind"))
def api_keys(request: HttpRequest) -> HttpResponse:
    """GET: the keys (and, once, a key just issued). POST: issue a key."""
    tenant = tenant_of(request)
    form = ApiKeyCreateForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        try:
            client, key = issue_api_key(tenant=tenant, issued_by=request.user, **form.cleaned_data)
        except ApiKeyLimitReached as exc:
            form.add_error("name", str(exc))
        else:
            shown = {"tenant": tenant.pk, "name": client.name, "key": key}
            _change_waiting_keys(request, lambda waiting: waiting.update({str(client.pk): shown}))
            return redirect(f"{reverse('dash-api-keys')}?issued={client.pk}")
    # a HEAD answers no body: it shows no key, so it must not use up the key's one showing
    new_key = _take_issued_key(request, tenant) if request.method == "GET" else None
    return render_page(
        request,
        "dashboard/api_keys.html",
        {"clients": listed(tenant), "form": form, "new_key": new_key},
        section="api_keys",
        status=400 if form.is_bound else 200,
    )


def _waiting_keys(stored: Any) -> dict[str, dict[str, Any]]:
    """The keys issued in this session and not shown yet, by id, from the session's value
    (a session from before keys were kept by id holds one, unnamed)."""
    waiting = stored or {}
    if "key" in waiting:
        waiting = {str(waiting.get("id")): {**waiting, "name": ""}}
    return dict(waiting)


def _change_waiting_keys(
    request: HttpRequest, change: Callable[[dict[str, dict[str, Any]]], T]
) -> T:
    """``change`` applied to the keys waiting in the session as stored now, written at once:
    another tab's request must not write back its older copy over a key issued meanwhile, a
    live key then shown to no one (:mod:`tenants.session_values`)."""

    def apply(stored: Any) -> tuple[dict[str, dict[str, Any]] | None, T]:
        waiting = _waiting_keys(stored)
        result = change(waiting)
        return waiting or None, result

    return change_value(request, NEW_KEY_SESSION, apply)


def _take_issued_key(request: HttpRequest, tenant: Tenant) -> dict[str, Any] | None:
    """The key this page was sent to show (``?issued=<id>``), taken out of the session so it
    is shown once; None when it was shown already, or when it was issued for another
    restaurant than the current one (switched in another tab before the page loaded): never
    shown here, and left in the session for the same page back in its own restaurant. Taken
    out unseen, it was a key never shown to anyone."""
    issued = request.GET.get("issued", "")

    def take(waiting: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
        if issued not in waiting or waiting[issued].get("tenant") != tenant.pk:
            return None
        return waiting.pop(issued)

    if issued not in _waiting_keys(request.session.get(NEW_KEY_SESSION)):
        return None  # nothing of this page's to take: no lock, no write
    return _change_waiting_keys(request, take)


@member_required(Area.API_KEYS)
@require_POST
@idempotent_form(fields=(), form_page="dash-api-keys")
def api_key_revoke(request: HttpRequest, client_id: int) -> HttpResponse:
    client = found(clients_of(tenant_of(request)).filter(pk=client_id).first())
    if revoke_api_key(client=client):
        messages.success(request, f"Revoked key {client.prefix} ({client.name}).")
    else:
        revoked_at = timezone.localtime(client.revoked_at).strftime("%Y-%m-%d %H:%M %Z")
        messages.info(
            request,
            f"Key {client.prefix} ({client.name}) was revoked already, at {revoked_at}; "
            "nothing changed.",
        )
    return redirect("dash-api-keys")

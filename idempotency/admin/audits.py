"""Staff review of the engine: committed records (read-only) and duplicate-hit audits.

Audit rows are evidence, so they are read-only; the only change staff make is to mark rows
reviewed with a resolution note (an action with a confirmation page). Rows export as CSV, with
keys as their keyed hashes.

Staff see less than the database holds: a record's stored reply body (a diner's order, as the
API answered it) is shown only to users with the ``idempotency.view_stored_body`` permission,
others see a placeholder; each view of a body and each export is written to
``StaffAccessLog`` (who, what, when), which staff can read but nobody can change.
"""

from __future__ import annotations

import csv
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.views.main import ChangeList
from django.db import models
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from idempotency.admin.distinct import IndexedValuesFilter, fixed_values_filter
from idempotency.admin.lookups import OfferedFiltersOnly
from idempotency.admin.paging import BoundedCountList, IndexSortedChangeList
from idempotency.admin.tenant_labels import TenantFilter, TenantLabelsMixin, tenant_labels
from idempotency.core.hashing import digest_candidates
from idempotency.core.keys import key_digest
from idempotency.models import DuplicateAudit, IdempotencyRecord, StaffAccessLog
from idempotency.stores.nodes import breaker_states

BREAKER_MODES = {
    "closed": "Redis + database",
    "open": "the database alone (breaker open)",
    "half_open": "the database alone, probing Redis",
}
MAX_REVIEW_BATCH = 500  # the confirmation page lists every row it will mark
# An export is written in the request, into memory: "select all" of a year's audits (2,000,000)
# held hundreds of MB and ran past gunicorn's timeout, which killed the worker. This many take
# a few seconds; staff narrow the list (filters, dates, search) to export more in parts.
MAX_EXPORT_ROWS = 50_000
MAX_LOGGED_IDS = 1000  # an access log row names at most this many objects (and counts all)
# Labels of DuplicateAudit.request_meta keys (the engine's, then payment callbacks').
META_LABELS = {
    "remote_addr": "Client IP",
    "user_agent": "User agent",
    "request_id": "Request ID (as in the logs)",
    "provider_txn_id": "Provider transaction",
    "status": "Provider status",
    "amount": "Amount",
    "currency": "Currency",
    "reason": "Decision",
}
# Where a duplicate's answer came from (DuplicateAudit.source, as the engine writes it)
AUDIT_SOURCES = ["local", "redis", "database"]
# The statuses the records' filter offers: the final answers an API stores (any other one is
# still filtered on from the URL); neither column is indexed, and reading the values a table
# holds was a read of every row
RESPONSE_STATUSES = [200, 201, 202, 204, 400, 403, 404, 409, 410, 422, 429]
SLASH_BREAK = mark_safe("/<wbr>")  # a constant: a slash the browser may break a line after
HIDDEN_BODY = "(hidden: seeing stored bodies needs the “view stored body” permission)"
CSV_COLUMNS = [
    "id",
    "at",
    "tenant_key",
    "outcome",
    "endpoint",
    "key",
    "source",
    "principal",
    "resource_ref",
    "differing_fields",
    "reviewed",
    "reviewed_by",
    "resolution_note",
]


class ReadOnlyAdmin(OfferedFiltersOnly, admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class LogsPersonalDataViews:
    """For a model admin whose object page shows personal data to some users: each such page
    sent (a GET answered 200) is written to ``StaffAccessLog`` as ``access_action``, before the
    page leaves. ``shows_personal_data(request)`` says whether this user's page holds it."""

    access_action: str

    def shows_personal_data(self, request: HttpRequest) -> bool:
        raise NotImplementedError

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        response = super().change_view(  # type: ignore[misc]
            request, object_id, form_url, extra_context
        )
        if (
            request.method == "GET"
            and response.status_code == 200
            and self.shows_personal_data(request)
        ):
            log_access(request, self.access_action, self.model, [object_id])  # type: ignore[attr-defined]
        return response


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(
    BoundedCountList, LogsPersonalDataViews, TenantLabelsMixin, ReadOnlyAdmin
):
    list_display = ["short_key", "tenant", "scope", "response_status", "created_at"]
    list_filter = [
        TenantFilter,
        ("response_status", fixed_values_filter(RESPONSE_STATUSES)),
        "created_at",
    ]
    search_fields = ["scope"]
    # newest first only: no column of the list is served by an index in that column's order,
    # and sorting by one sorted 5,000,000 records on every page view (1.1-1.4 s)
    sortable_by: list[str] = []
    # no date drill-down: its first and last dates are a read of every record (created_at is
    # not indexed, and an index would cost every request that stores one); the created_at
    # filter narrows the list to today, the past 7 days, this month or this year
    exclude = ["response_body"]

    @admin.display(description="key digest", ordering="key")
    def short_key(self, obj: IdempotencyRecord) -> str:
        """The digest's first hex digits tell rows apart; the record's page shows it all."""
        return _shortened(obj.key, limit=14)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[IdempotencyRecord], search_term: str
    ) -> tuple[QuerySet[IdempotencyRecord], bool]:
        """Records keep keys as digests, so a key typed in the search box is digested the same
        way (its digest, pasted from a row, matches too); the term also matches scopes."""
        term = search_term.strip()
        if not term:
            return queryset, False
        return queryset.filter(_by_key(term, {key_digest(term)}) | Q(scope__icontains=term)), False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return ["body_preview" if may_see_bodies(request) else "body_hidden"]

    access_action = StaffAccessLog.Action.VIEW_STORED_BODY

    def shows_personal_data(self, request: HttpRequest) -> bool:
        return may_see_bodies(request)

    @admin.display(description="response body (first 2 kB)")
    def body_preview(self, obj: IdempotencyRecord) -> str:
        body = bytes(obj.response_body or b"")
        return body[:2048].decode("utf-8", "replace") or "(empty)"

    @admin.display(description="response body")
    def body_hidden(self, obj: IdempotencyRecord) -> str:
        return HIDDEN_BODY


class ResolutionForm(forms.Form):
    resolution_note = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80}),
        max_length=2000,
        help_text="What was found and what, if anything, was done.",
    )


@admin.register(DuplicateAudit)
class DuplicateAuditAdmin(
    BoundedCountList, LogsPersonalDataViews, TenantLabelsMixin, ReadOnlyAdmin
):
    list_display = [
        "at",
        "outcome",
        "tenant",
        "request_route",
        "short_key",
        "resource",
        "reviewed",
    ]
    list_filter = [
        "outcome",
        TenantFilter,
        ("endpoint", IndexedValuesFilter),
        "at",
        "reviewed",
        ("source", fixed_values_filter(AUDIT_SOURCES)),
    ]
    search_fields = ["=key", "resource_ref"]
    search_help_text = (
        "An idempotency key (matched by its keyed hash), or the URL of the resource an "
        "operation made (its Location)"
    )
    # by the columns an index serves in their order: a sort by restaurant, outcome, endpoint
    # or review sorted every audit on each page view
    sortable_by = ["at", "short_key", "resource"]
    # the restaurant by its name, as the list names it (the tenant key named nothing)
    fields = [
        "tenant",
        "endpoint",
        "key",
        "outcome",
        "source",
        "principal",
        "differing_fields",
        "resource_ref",
        "at",
        "reviewed",
        "reviewed_by",
        "resolution_note",
        "request_details",
    ]
    readonly_fields = ["tenant", "request_details"]
    date_hierarchy = "at"
    actions = ["mark_reviewed", "export_csv"]
    # an audit's page shows the request's client address and user agent: personal data
    access_action = StaffAccessLog.Action.VIEW_REQUEST_DETAILS

    def shows_personal_data(self, request: HttpRequest) -> bool:
        return True

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The list, headed by each Redis node's circuit breaker: staff's view of why audits
        say "database" (merchants' pages leave the engine's internals out)."""
        nodes = [
            {"name": name, "state": state.replace("_", "-"), "mode": BREAKER_MODES.get(state)}
            for name, state in sorted(breaker_states().items())
        ]
        return super().changelist_view(request, {**(extra_context or {}), "engine_nodes": nodes})

    @admin.display(description="key hash", ordering="key")
    def short_key(self, obj: DuplicateAudit) -> str:
        """The hash's key id and first hex digits tell rows apart; the page shows it all."""
        return _shortened(obj.key, limit=14)

    @admin.display(description="endpoint", ordering="endpoint")
    def request_route(self, obj: DuplicateAudit) -> str:
        return _breakable(obj.endpoint)

    @admin.display(description="resource", ordering="resource_ref")
    def resource(self, obj: DuplicateAudit) -> str:
        return _breakable(obj.resource_ref)

    @admin.display(description="request")
    def request_details(self, obj: DuplicateAudit) -> str:
        """The request's metadata as labelled fields (client IP, user agent, request id; a
        payment callback's transaction, status and amount), not raw JSON."""
        meta = obj.request_meta or {}
        if not meta:
            return "—"
        rows = format_html_join(
            "",
            "<tr><th scope='row'>{}</th><td>{}</td></tr>",
            (
                (META_LABELS.get(k, k.replace("_", " ").capitalize()), v or "—")
                for k, v in meta.items()
            ),
        )
        return format_html("<table class='request-details'><tbody>{}</tbody></table>", rows)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[DuplicateAudit], search_term: str
    ) -> tuple[QuerySet[DuplicateAudit], bool]:
        """Audits keep keys as keyed hashes, so a key typed in the search box is hashed under
        every configured hash key (rows from before a rotation match too); the hash itself,
        pasted from a row, matches too."""
        term = search_term.strip()
        if not term:
            return queryset, False
        digests = set(digest_candidates(term))
        return queryset.filter(_by_key(term, digests) | Q(resource_ref__icontains=term)), False

    def has_review_permission(self, request: HttpRequest) -> bool:
        """Marking reviewed is the one write on audits: it needs the model's change permission
        (the rows themselves stay read-only in the form)."""
        return request.user.has_perm("idempotency.change_duplicateaudit")

    @admin.action(description="Mark reviewed (with a resolution note)", permissions=["review"])
    def mark_reviewed(
        self, request: HttpRequest, queryset: QuerySet[DuplicateAudit]
    ) -> HttpResponse | None:
        if more_than(queryset, MAX_REVIEW_BATCH):
            self.message_user(
                request, f"Select at most {MAX_REVIEW_BATCH} audits at a time.", messages.WARNING
            )
            return None
        form = ResolutionForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            # an audit reviewed already (a second run, a colleague meanwhile) keeps its review
            selected = queryset.count()
            updated = queryset.filter(reviewed=False).update(
                reviewed=True,
                reviewed_by=request.user.get_username(),
                resolution_note=form.cleaned_data["resolution_note"],
            )
            self.message_user(request, f"{updated} audit(s) marked reviewed.", messages.SUCCESS)
            if selected > updated:
                self.message_user(
                    request,
                    f"{selected - updated} were reviewed already; left as they were.",
                    messages.WARNING,
                )
            return None
        audits = list(queryset)
        labels = tenant_labels(audit.tenant_key for audit in audits)
        for audit in audits:
            audit.tenant_label = labels[audit.tenant_key]
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "title": "Mark duplicate-hit audits reviewed",
            "opts": self.model._meta,
            "audits": audits,
            "form": form,
            "action_name": "mark_reviewed",
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(
            request, "admin/idempotency/duplicateaudit/mark_reviewed.html", context
        )

    @admin.action(description="Export selected as CSV")
    def export_csv(
        self, request: HttpRequest, queryset: QuerySet[DuplicateAudit]
    ) -> HttpResponse | None:
        """The selected audits as CSV, at most ``MAX_EXPORT_ROWS`` (counted no further)."""
        if more_than(queryset, MAX_EXPORT_ROWS):
            self.message_user(
                request,
                f"Export at most {MAX_EXPORT_ROWS} audits at a time: narrow the list with a "
                "filter, the dates or the search, and export it in parts.",
                messages.WARNING,
            )
            return None
        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="duplicate-audits-{stamp}.csv"'
        writer = csv.writer(response)
        writer.writerow(CSV_COLUMNS)
        ids = []
        for audit in queryset.order_by("at", "id").iterator():
            writer.writerow([_csv_cell(_value(audit, column)) for column in CSV_COLUMNS])
            ids.append(audit.pk)
        log_access(request, StaffAccessLog.Action.EXPORT_AUDITS, DuplicateAudit, ids)
        return response


@admin.register(StaffAccessLog)
class StaffAccessLogAdmin(BoundedCountList, ReadOnlyAdmin):
    """Who saw stored bodies or exported audits: read-only, for the data-protection officer."""

    list_display = ["at", "actor", "action", "object_type", "row_count"]
    list_filter = ["action", "at"]
    search_fields = ["=actor"]  # see get_search_results
    search_help_text = "A staff member's user name (exactly)"
    # the log is kept for good: newest first or by date only (the column an index serves), and
    # the search through the actor's index
    sortable_by = ["at"]
    date_hierarchy = "at"

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return IndexSortedChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[StaffAccessLog], search_term: str
    ) -> tuple[QuerySet[StaffAccessLog], bool]:
        """Who looked, by their user name compared exactly, through its index: Django's
        "=actor" compares ``UPPER(actor::text)``, which no index holds, so every search read
        the whole log. User names are told apart by case, as Django's sign-in does."""
        term = search_term.strip()
        return (queryset.filter(actor=term) if term else queryset), False


def may_see_bodies(request: HttpRequest) -> bool:
    return request.user.has_perm("idempotency.view_stored_body")


def log_access(
    request: HttpRequest, action: str, model: type[models.Model], ids: list[Any]
) -> StaffAccessLog:
    return StaffAccessLog.objects.create(
        actor=request.user.get_username(),
        action=action,
        object_type=model._meta.label,
        object_ids=[str(i) for i in ids[:MAX_LOGGED_IDS]],
        row_count=len(ids),
    )


def _breakable(path: str) -> str:
    """A route or URL the browser may wrap after each slash, so long ids fit the list."""
    if not path:
        return "—"
    return format_html_join(SLASH_BREAK, "{}", ((part,) for part in path.split("/")))


def _by_key(term: str, digests: set[str]) -> Q:
    """Rows whose key is one of the term's ``digests``, or the stored digest pasted from a row:
    whole, or as the lists show it (its start and "…")."""
    if term.endswith("…"):
        return Q(key__startswith=term.removesuffix("…"))
    return Q(key__in={*digests, term})


def _shortened(key: str, limit: int = 24) -> str:
    """Keys can be 255 characters: the lists show their start (search finds the whole)."""
    return key if len(key) <= limit else f"{key[: limit - 1]}…"


def more_than(queryset: QuerySet[DuplicateAudit], limit: int) -> bool:
    """Whether a selection ("select all" included) holds more than ``limit`` audits, counted
    no further than one past it and unordered: a count of every audit the list held, in the
    list's order, cost a whole-table read per action over millions of audits."""
    return queryset.order_by()[: limit + 1].count() > limit


def _value(audit: DuplicateAudit, column: str) -> object:
    value = getattr(audit, column)
    if column == "differing_fields":
        return " ".join(value or [])
    if column == "at":
        return value.isoformat()
    return value


def _csv_cell(value: object) -> str:
    """Keys and endpoints come from clients: keep a spreadsheet from running them as formulas."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text

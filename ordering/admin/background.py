"""Staff admin for layer 4: dead letters (requeue / discard), provider conflicts (resolve with an
outcome and a note), the outbox.

Dead letters are the saga steps that failed past their retries; the order they belong to stays
CANCELLING and flagged until staff requeue (run the step again: at most once, thanks to its
compensation id) or discard it, after a confirmation page, with a note of what was done
instead. Both actions only act on open letters, so a double click requeues once.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db import DatabaseError
from django.db.models import OuterRef, QuerySet
from django.http import HttpRequest, HttpResponse

from idempotency.admin import ReadOnlyAdmin
from idempotency.admin.paging import BoundedCountList, IndexSortedChangeList
from ordering.admin.confirmation import Confirmation, confirmation_page, confirmed_form
from ordering.background.dead_letters import (
    DeadLetterNotOpen,
    discard_dead_letter,
    requeue_dead_letter,
)
from ordering.models import (
    Compensation,
    DeadLetter,
    OutboxEvent,
    PaymentCallback,
    ProviderConflict,
)
from ordering.payments.capture_refunds import (
    CaptureRefundRunning,
    refund_step_status,
    waiting_for_staff,
)
from ordering.payments.conflicts import MAX_NOTE_CHARS, ConflictNotOpen, resolve_conflict
from tenants.write_fence import refused_by_fence

# the start of each letter's error on the discard page; the whole is on the letter's page
SHOWN_ERROR_CHARS = 200


class DiscardForm(forms.Form):
    note = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80}),
        max_length=MAX_NOTE_CHARS,
        help_text="What was done instead (kept with your name and the time).",
    )


@admin.register(DeadLetter)
class DeadLetterAdmin(BoundedCountList, ReadOnlyAdmin):
    list_display = [
        "id",
        "created_at",
        "tenant",
        "order",
        "step",
        "attempts",
        "state",
        "resolved_by",
    ]
    list_filter = ["state", "task", "tenant"]
    # named: both are nullable, and Django's automatic select_related follows only required
    # foreign keys (each row listed had cost two more statements)
    list_select_related = ["tenant", "order"]
    search_fields = ["key", "order__id", "error"]
    actions = ["requeue", "discard"]

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return obj is None and request.user.has_perm("ordering.change_deadletter")

    @admin.display(description="step", ordering="key")
    def step(self, letter: DeadLetter) -> str:
        """What failed: the key's last part (``cancel:<order>:refund_payment``); the whole key
        and the task are on the letter's page and in the filters."""
        return letter.key.rsplit(":", 1)[-1]

    @admin.action(description="Requeue (run the failed step again)", permissions=["change"])
    def requeue(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> None:
        self._each(
            request,
            queryset,
            lambda pk: requeue_dead_letter(
                dead_letter_id=pk, actor=f"staff:{request.user.get_username()}"
            ),
            "requeued",
        )

    @admin.action(description="Discard (close without running again)", permissions=["change"])
    def discard(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> HttpResponse | None:
        """The step never runs again (a refund that failed is not sent), so the letters are
        shown first, and closed only with a note of what was done instead."""
        form = confirmed_form(request, DiscardForm)
        if not form.is_valid():
            letters = list(queryset.select_related("tenant").order_by("pk"))
            return confirmation_page(
                self,
                request,
                action="discard",
                pks=[letter.pk for letter in letters],
                form=form,
                page=Confirmation(
                    title="Discard dead letters",
                    consequence=(
                        "These failed steps will not run again, and the orders they belong to "
                        "stay where they are (a refund that failed is not sent). Do it some "
                        "other way first, and say what you did."
                    ),
                    headers=["Id", "Restaurant", "Order", "Step", "Attempts", "Error"],
                    rows=[
                        (
                            letter.pk,
                            letter.tenant,
                            letter.order_id,
                            self.step(letter),
                            letter.attempts,
                            letter.error[:SHOWN_ERROR_CHARS],
                        )
                        for letter in letters
                    ],
                    submit="Yes, discard",
                ),
            )
        self._each(
            request,
            queryset,
            lambda pk: discard_dead_letter(
                dead_letter_id=pk,
                actor=f"staff:{request.user.get_username()}",
                note=form.cleaned_data["note"],
            ),
            "discarded",
        )
        return None

    def _each(self, request: HttpRequest, queryset: QuerySet[DeadLetter], step, verb: str) -> None:
        """``step`` for each letter, each in its own transaction. A letter of a restaurant
        being offboarded (its rows fenced, :mod:`tenants.write_fence`) is left open and named:
        it answered the 409 page "not saved", though the letters before it were done."""
        done = skipped = 0
        fenced = []
        for pk in queryset.values_list("pk", flat=True):
            try:
                step(pk)
                done += 1
            except DeadLetterNotOpen:
                skipped += 1
            except DatabaseError as exc:
                if not refused_by_fence(exc):
                    raise
                fenced.append(str(pk))
        self.message_user(request, f"{done} dead letter(s) {verb}.", messages.SUCCESS)
        if skipped:
            self.message_user(request, f"{skipped} were not open any more.", messages.WARNING)
        if fenced:
            self.message_user(
                request,
                f"Left open, their restaurant being offboarded: {', '.join(fenced)}.",
                messages.WARNING,
            )


class ConflictStateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("open", "Open"),
            ("waiting", "Open, waiting for staff"),
            ("resolved", "Resolved"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        """``waiting``: the open conflicts the platform is not refunding by itself, those
        ``ProviderConflictsWaitingForStaff`` counts, so the alert's count is the list."""
        if self.value() == "waiting":
            return waiting_for_staff(queryset)
        if self.value() in ("open", "resolved"):
            return queryset.filter(resolved=self.value() == "resolved")
        return queryset


class ResolveConflictForm(forms.Form):
    outcome = forms.ChoiceField(
        choices=ProviderConflict.Outcome.choices,
        widget=forms.RadioSelect,
        help_text="What was done at the provider; nothing is moved from here.",
    )
    note = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80}),
        max_length=MAX_NOTE_CHARS,
        help_text="What was found and done (kept with your name and the time).",
    )


@admin.register(ProviderConflict)
class ProviderConflictAdmin(ReadOnlyAdmin):
    """Open conflicts first; staff resolve them with an outcome and a note (the one write)."""

    list_display = [
        "created_at",
        "tenant",
        "order_number",
        "kind",
        "amounts",
        "state",
        "resolved_by",
    ]
    list_filter = [ConflictStateFilter, "kind", "outcome", "tenant"]
    list_select_related = ["tenant", "order"]
    search_fields = ["=order__id", "=provider_txn_id", "=event_id"]
    ordering = ["resolved", "-created_at"]
    actions = ["resolve"]
    readonly_fields = ["state", "first_received"]  # on each conflict's page too

    def get_queryset(self, request: HttpRequest) -> QuerySet[ProviderConflict]:
        """Each conflict with the state of the platform's refund of its money
        (``platform_refund``), which :meth:`state` reads."""
        return (
            super()
            .get_queryset(request)
            .annotate(platform_refund=refund_step_status(OuterRef("payment_id")))
        )

    def has_resolve_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("ordering.change_providerconflict")

    @admin.display(description="order", ordering="order__number")
    def order_number(self, conflict: ProviderConflict) -> str:
        return f"{conflict.order.number_label} ({conflict.order_id})"

    @admin.display(description="expected → reported")
    def amounts(self, conflict: ProviderConflict) -> str:
        return (
            f"{conflict.expected_amount} {conflict.expected_currency} → "
            f"{conflict.reported_amount} {conflict.reported_currency}"
        )

    @admin.display(description="state", ordering="resolved")
    def state(self, conflict: ProviderConflict) -> str:
        """Open conflicts say whether staff have anything to do: money the platform is
        refunding needs nobody (a Resolve is refused meanwhile), and a refund of it that
        failed for good waits for staff (a refund by hand, or its dead letter requeued)."""
        if conflict.resolved:
            return conflict.get_outcome_display()
        refund = getattr(conflict, "platform_refund", None)
        if refund == Compensation.Status.PENDING:
            return "Open: the platform is refunding it"
        if refund == Compensation.Status.FAILED:
            return "Open: the platform's refund failed for good (see its dead letter)"
        return "Open"

    @admin.display(description="event id first received as")
    def first_received(self, conflict: ProviderConflict) -> str:
        """For an event id the provider reused, the event first received under it (the one
        the inbox kept, and applied if it could be), so staff can set the two side by side
        at the provider; "-" for the other kinds."""
        if conflict.kind != ProviderConflict.Kind.EVENT_ID_REUSED:
            return "-"
        first = PaymentCallback.all_tenants.filter(
            tenant=conflict.tenant_id, provider=conflict.provider, event_id=conflict.event_id
        ).first()
        if first is None:
            return "-"
        return (
            f"order {first.order_id}, transaction {first.provider_txn_id}: {first.status} "
            f"{first.amount} {first.currency}, received {first.received_at:%Y-%m-%d %H:%M:%S} "
            f"({first.get_outcome_display()})"
        )

    @admin.action(description="Resolve (with an outcome and a note)", permissions=["resolve"])
    def resolve(
        self, request: HttpRequest, queryset: QuerySet[ProviderConflict]
    ) -> HttpResponse | None:
        form = confirmed_form(request, ResolveConflictForm)
        if form.is_valid():
            done = skipped = refunding = 0
            for pk in queryset.order_by("pk").values_list("pk", flat=True):
                try:
                    resolve_conflict(
                        conflict_id=pk,
                        outcome=form.cleaned_data["outcome"],
                        note=form.cleaned_data["note"],
                        actor=f"staff:{request.user.get_username()}",
                    )
                    done += 1
                except ConflictNotOpen:
                    skipped += 1
                except CaptureRefundRunning:
                    refunding += 1
            self.message_user(request, f"{done} conflict(s) resolved.", messages.SUCCESS)
            if skipped:
                self.message_user(
                    request,
                    f"{skipped} were resolved already; left as they were.",
                    messages.WARNING,
                )
            if refunding:
                self.message_user(
                    request,
                    f"{refunding} are being refunded by the platform; left open: each closes "
                    "by itself when its refund is done, or can be resolved here once the "
                    "refund has failed for good (dead letters).",
                    messages.WARNING,
                )
            return None
        conflicts = list(queryset.select_related("tenant", "order").order_by("pk"))
        return confirmation_page(
            self,
            request,
            action="resolve",
            pks=[c.pk for c in conflicts],
            form=form,
            page=Confirmation(
                title="Resolve payment provider conflicts",
                consequence=(
                    f"These {len(conflicts)} conflict(s) will be resolved by "
                    f"{request.user.get_username()} with the outcome and note below. "
                    "Conflicts resolved meanwhile are left as they are."
                ),
                headers=["Reported", "Tenant", "Order", "Kind", "Expected → reported", "State"],
                rows=[
                    (
                        f"{c.created_at:%Y-%m-%d %H:%M:%S}",
                        c.tenant,
                        f"{c.order.number_label} ({c.order_id})",
                        c.get_kind_display(),
                        f"{c.expected_amount} {c.expected_currency} → "
                        f"{c.reported_amount} {c.reported_currency}",
                        self.state(c),
                    )
                    for c in conflicts
                ],
                submit="Resolve",
            ),
        )


@admin.register(OutboxEvent)
class OutboxEventAdmin(BoundedCountList, ReadOnlyAdmin):
    list_display = ["id", "tenant", "event_type", "created_at", "published_at"]
    list_filter = ["event_type", "tenant"]
    # the columns an index serves: sorted by published_at the list of 2,000,000 events sorted
    # them all on each page view (2.8 s)
    sortable_by = ["id", "created_at"]

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return IndexSortedChangeList

"""Staff admin for layer 4: dead letters (requeue / discard), provider conflicts, the outbox.

Dead letters are the saga steps that failed past their retries; the order they belong to stays
CANCELLING and flagged until staff requeue (run the step again: at most once, thanks to its
compensation id) or discard it with a note. Both actions only act on open letters, so a double
click requeues once.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from idempotency.admin import ReadOnlyAdmin
from ordering.background.dead_letters import (
    DeadLetterNotOpen,
    discard_dead_letter,
    requeue_dead_letter,
)
from ordering.models import DeadLetter, OutboxEvent, ProviderConflict


@admin.register(DeadLetter)
class DeadLetterAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "created_at",
        "tenant",
        "order",
        "key",
        "task",
        "attempts",
        "state",
        "resolved_by",
    ]
    list_filter = ["state", "task", "tenant"]
    search_fields = ["key", "order__id", "error"]
    actions = ["requeue", "discard"]

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return obj is None and request.user.has_perm("ordering.change_deadletter")

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
    def discard(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> None:
        self._each(
            request,
            queryset,
            lambda pk: discard_dead_letter(
                dead_letter_id=pk,
                actor=f"staff:{request.user.get_username()}",
                note="discarded in the admin",
            ),
            "discarded",
        )

    def _each(self, request: HttpRequest, queryset: QuerySet[DeadLetter], step, verb: str) -> None:
        done = skipped = 0
        for pk in queryset.values_list("pk", flat=True):
            try:
                step(pk)
                done += 1
            except DeadLetterNotOpen:
                skipped += 1
        self.message_user(request, f"{done} dead letter(s) {verb}.", messages.SUCCESS)
        if skipped:
            self.message_user(request, f"{skipped} were not open any more.", messages.WARNING)


@admin.register(ProviderConflict)
class ProviderConflictAdmin(ReadOnlyAdmin):
    list_display = [f.name for f in ProviderConflict._meta.fields][:8]
    list_filter = ["tenant"]


@admin.register(OutboxEvent)
class OutboxEventAdmin(ReadOnlyAdmin):
    list_display = ["id", "tenant", "event_type", "created_at", "published_at"]
    list_filter = ["event_type", "tenant"]

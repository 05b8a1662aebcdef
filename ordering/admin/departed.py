"""Staff admin of the payments of restaurants that left (read only).

Each row is a payment a provider could still capture after its restaurant's tables closed
(:mod:`ordering.payments.departed`). A capture reported for one is refunded by the platform
by itself; this list is where staff see it happen: the ones captured (filter "refund"), the
refund made or failing, and why. A refund that failed for good has a dead letter (no
restaurant, the step ``refund_capture``; its payload names the restaurant), which staff
requeue or discard with a note, as any other: the row follows it.
"""

from __future__ import annotations

from django.contrib import admin

from idempotency.admin import ReadOnlyAdmin
from idempotency.admin.paging import BoundedCountList
from ordering.models import DepartedPayment


@admin.register(DepartedPayment)
class DepartedPaymentAdmin(BoundedCountList, ReadOnlyAdmin):
    list_display = [
        "recorded_at",
        "tenant_slug",
        "order_ref",
        "provider_txn_id",
        "amounts",
        "refund",
        "captured_at",
        "refunded_at",
    ]
    list_filter = ["refund", "provider"]
    search_fields = ["=provider_txn_id", "=tenant_slug", "=order_ref"]

    @admin.display(description="amount (captured)")
    def amounts(self, row: DepartedPayment) -> str:
        """The payment's amount, and what the provider reported captured if it did."""
        captured = (
            f" ({row.captured_amount} {row.captured_currency})"
            if row.captured_amount is not None
            else ""
        )
        return f"{row.amount} {row.currency}{captured}"

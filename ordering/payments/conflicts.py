"""Staff resolve payment provider conflicts: an outcome, a note, who and when; once.

A conflict (``ProviderConflict``: an amount that is not the order's, success for an order no
longer paying) changes nothing by itself: staff look at it, act at the provider if money must
move, and record here what they decided. Resolving is one conditional update on the open row,
so a double click, or two staff members at once, resolve it once and the second is told it was
resolved already.

Money the order did not want (captured after a cancel, or a second payment) is given back by
the platform, which resolves its conflict itself (:mod:`ordering.payments.capture_refunds`):
staff can resolve it by hand only once that refund has failed for good, and doing so closes
the refund, so it cannot run after staff settled the money another way.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import QuerySet
from django.db.models.functions import Now

from ordering.models import ProviderConflict
from ordering.payments.capture_refunds import hand_capture_refund_to_staff, refuse_while_refunding
from tenants.models import Tenant

logger = logging.getLogger(__name__)
MAX_NOTE_CHARS = 2000


class ConflictNotOpen(Exception):
    """The conflict does not exist, or was resolved already."""


def resolve_conflict(*, conflict_id: int, outcome: str, note: str, actor: str) -> ProviderConflict:
    """Close the conflict with ``outcome`` (a :class:`ProviderConflict.Outcome`) and ``note``;
    :class:`ConflictNotOpen` if it is not open, and
    :class:`ordering.payments.capture_refunds.CaptureRefundRunning` while the platform is still
    refunding the money it is about, or the payment it names (another amount reported for
    money the platform is refunding: resolved by hand now, it could go back twice); nothing
    changed, either way."""
    if outcome not in ProviderConflict.Outcome.values:
        raise ValueError(f"unknown outcome {outcome!r}")
    if not note.strip() or len(note) > MAX_NOTE_CHARS:
        raise ValueError(f"a note of 1-{MAX_NOTE_CHARS} characters is required")
    with transaction.atomic():
        conflict = ProviderConflict.all_tenants.filter(pk=conflict_id, resolved=False).first()
        if conflict is None:
            raise ConflictNotOpen(f"provider conflict {conflict_id} is not open")
        if conflict.payment_id is not None and conflict.refunded_by_platform:
            hand_capture_refund_to_staff(payment_id=conflict.payment_id, actor=actor)
        elif conflict.payment_id is not None:
            refuse_while_refunding(payment_id=conflict.payment_id)
        closed = ProviderConflict.all_tenants.filter(pk=conflict_id, resolved=False).update(
            resolved=True,
            outcome=outcome,
            resolution_note=note.strip(),
            resolved_by=actor[:150],
            resolved_at=Now(),
        )
        if not closed:  # resolved meanwhile: by staff, or by the platform's refund
            raise ConflictNotOpen(f"provider conflict {conflict_id} is not open")
    logger.info("provider conflict %s resolved (%s) by %s", conflict_id, outcome, actor)
    return ProviderConflict.all_tenants.get(pk=conflict_id)


def open_conflicts(*, tenant: Tenant | None = None) -> QuerySet[ProviderConflict]:
    conflicts = ProviderConflict.all_tenants.filter(resolved=False)
    return conflicts.filter(tenant=tenant) if tenant is not None else conflicts

"""A writer that pays an order and takes that back, again and again, for tests of reads that
must show an order and its payment from one moment."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection, transaction

from ordering.models import Order, Payment

# each flip writes one of these (the order's status, its payment's) in one transaction
STATES = [("PAID", "succeeded"), ("PAYING", "pending")]


@contextmanager
def paying_flips(order: Order, payment: Payment) -> Iterator[list[str]]:
    """Inside the block a thread flips the order and its payment between the two ``STATES``,
    each flip in one transaction (as a provider's callback writes them); yields the list of
    the flips written so far, which grows while the block runs."""
    done = threading.Event()
    flips: list[str] = []

    def flip() -> None:
        try:
            while not done.is_set():
                status, paid = STATES[len(flips) % 2]
                with transaction.atomic():
                    Order.all_tenants.filter(pk=order.pk).update(status=status)
                    Payment.all_tenants.filter(pk=payment.pk).update(status=paid)
                flips.append(status)
        finally:
            connection.close()

    writer = threading.Thread(target=flip)
    writer.start()
    try:
        yield flips
    finally:
        done.set()
        writer.join(60)

"""``manage.py simulate_payment ORDER_ID [--status failed] [--amount 1.00] [--url URL]
[--lose-callback]``

Play the simulated provider for the demo: the diner pays (or is declined), as the provider's
books record, and the provider sends its signed callback for the order's payment
(``--lose-callback``: it never arrives; reconciliation asks the provider). Without ``--url``
the callback goes through the webhook service in-process; with
``--url http://127.0.0.1:8000`` it is POSTed to a running server, exactly as the provider
would (signature, timestamp header and all). Sending it twice shows duplicate handling.
"""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.request
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ordering.models import Payment, PaymentCallback
from ordering.payments.callbacks import handle_payment_callback
from ordering.payments.error_codes import CallbackRejected
from ordering.payments.signatures import SIGNATURE_HEADER, TIMESTAMP_HEADER
from ordering.payments.simulated import book, signed_callback


def default_event_id(payment: Payment, status: str, amount: Decimal | None) -> str:
    """The provider's id for this report: one per payment and outcome, as the simulated
    provider's own confirmation names it, so the same report sent again is a duplicate. A
    report of another amount is another event (a provider does not resend an event with new
    contents): under the success's id it was answered as that success sent again once the
    payment was reported taken, never reaching the amount check that makes it a conflict."""
    event_id = f"evt_{payment.provider_txn_id}_{status}"
    return event_id if amount is None else f"{event_id}_{amount:f}"


def reported_amount(text: str) -> Decimal:
    """``--amount``: an amount as a provider reports one, of at most 2 decimals and within the
    column that keeps reported amounts (under 10^10), else the option's usage error.

    Why here: text that is no number raised ``decimal.InvalidOperation`` out of the command (a
    traceback), and a long amount (``1e999``) made :func:`default_event_id`, which names it,
    longer than a provider's event id may be: the callback was refused for its event id, an
    option the user never gave."""
    field = PaymentCallback._meta.get_field("amount")
    whole_digits = field.max_digits - field.decimal_places
    try:
        amount = Decimal(text)
    except InvalidOperation:
        amount = None
    if (
        amount is None
        or not amount.is_finite()
        or amount < 0
        or amount.adjusted() >= whole_digits
        or amount != amount.quantize(Decimal(1).scaleb(-field.decimal_places))
    ):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an amount of at most {field.decimal_places} decimals "
            f"from 0 to under 10^{whole_digits} (e.g. 1.00)"
        )
    return amount


class Command(BaseCommand):
    help = "Send the simulated provider's signed payment callback for an order."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("order_id", type=int)
        parser.add_argument("--status", choices=["succeeded", "failed"], default="succeeded")
        parser.add_argument(
            "--amount", type=reported_amount, help="Report another amount (a conflict)"
        )
        parser.add_argument("--event-id", help="Provider event id (repeat one to send a duplicate)")
        parser.add_argument(
            "--url", help="Base URL of a running server, e.g. http://127.0.0.1:8000"
        )
        parser.add_argument(
            "--lose-callback",
            action="store_true",
            help="The diner pays, but the callback never arrives (reconciliation finds it)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        payment = (
            Payment.all_tenants.filter(order_id=options["order_id"]).order_by("-created_at").first()
        )
        if payment is None:
            raise CommandError(f"order {options['order_id']} has no payment (pay it first)")
        if options["amount"] is None:  # the provider's books hold what it reports
            book(payment=payment, status=options["status"])
        if options["lose_callback"]:
            self.stdout.write(
                f"{options['status']} at the provider; no callback sent "
                "(manage.py reconcile_payments asks the provider)"
            )
            return
        body, headers = signed_callback(
            payment=payment,
            status=options["status"],
            amount=options["amount"],
            event_id=options["event_id"]
            or default_event_id(payment, options["status"], options["amount"]),
        )
        if options["url"]:
            self.stdout.write(self._post(options["url"], body, headers))
            return
        try:
            result = handle_payment_callback(
                provider_name=payment.provider,
                raw_body=body,
                timestamp=headers[TIMESTAMP_HEADER],
                signature=headers[SIGNATURE_HEADER],
            )
        except CallbackRejected as exc:
            raise CommandError(f"{exc.error_code}: {exc.detail}") from exc
        self.stdout.write(json.dumps(result.as_dict()))

    def _post(self, base_url: str, body: bytes, headers: dict[str, str]) -> str:
        request = urllib.request.Request(
            base_url.rstrip("/") + "/api/v1/payments/callback/",
            data=body,
            headers={**headers, "Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return f"{response.status} {response.read().decode()}"
        except urllib.error.HTTPError as exc:  # refused: the command fails (exit status 1)
            raise CommandError(f"{exc.code} {exc.read().decode()}") from None
        except urllib.error.URLError as exc:
            raise CommandError(f"{base_url} did not answer: {exc.reason}") from None

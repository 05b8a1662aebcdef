"""``manage.py simulate_payment``: the demo's stand-in for the provider."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ordering.models import ProviderConflict
from tests.payments.helpers import paying_order


@pytest.mark.django_db
@pytest.mark.parametrize(("status", "fails"), [(200, False), (400, True)])
def test_simulate_payment_over_http_fails_when_the_server_refuses(tenant, menu, status, fails):
    """``--url``: the provider's callback POSTed to a server; a refusal (the server's host
    check, a bad signature) is the command's failure, not a line printed with exit status 0."""

    class Answer(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(status)
            self.end_headers()
            self.wfile.write(b'{"code": "BAD_REQUEST"}')

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    order, _ = paying_order(tenant, menu["pizza"])
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        if fails:
            with pytest.raises(CommandError, match="400"):
                call_command("simulate_payment", str(order.pk), "--url", url, stdout=StringIO())
        else:
            out = StringIO()
            call_command("simulate_payment", str(order.pk), "--url", url, stdout=out)
            assert out.getvalue().startswith("200 ")
    finally:
        server.shutdown()
        server.server_close()


def simulate(order_id: int, *args: str) -> dict[str, object]:
    out = StringIO()
    call_command("simulate_payment", str(order_id), *args, stdout=out)
    return json.loads(out.getvalue())


@pytest.mark.django_db
def test_another_amount_reported_for_a_paid_order_is_a_conflict(tenant, menu):
    """``--amount`` is "another amount (a conflict)" (docs/payments-and-saga.md): its event
    was the success's own id (one per payment and outcome), so once the payment was reported
    taken, as the demo's own confirmation does 2 s after a pay, the provider's report of
    another amount was answered as the success sent again (``duplicate``) and staff saw
    nothing. Another amount is another event; the same one sent twice is still one."""
    # given an order paid by the provider's success
    order, payment = paying_order(tenant, menu["pizza"])
    assert simulate(order.pk)["result"] == "applied"
    # when the provider reports another amount taken, twice
    first = simulate(order.pk, "--amount", "1.00")
    again = simulate(order.pk, "--amount", "1.00")
    # then it is one amount_mismatch conflict for staff, and the order stays paid
    assert (first["result"], first["conflict"], first["order_status"]) == (
        "conflict",
        "amount_mismatch",
        "PAID",
    )
    assert again["result"] == "duplicate"
    assert ProviderConflict.all_tenants.filter(payment=payment).count() == 1
    assert simulate(order.pk)["result"] == "duplicate"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "amount",
    [
        pytest.param("abc", id="not-a-number"),
        pytest.param("1,00", id="decimal-comma"),
        pytest.param("1e999", id="exponent-999"),
        pytest.param("1" * 120, id="120-digits"),
    ],
)
def test_an_amount_the_provider_cannot_report_is_refused_as_the_amount(tenant, menu, amount):
    """``--amount`` is read as the provider reports amounts (at most 2 decimals, within the
    column that keeps them); anything else is the option's usage error, and nothing is sent.
    Red before: text that is no number raised ``decimal.InvalidOperation`` (a traceback), and
    a long amount made the event id it names (``evt_<txn>_succeeded_<amount>``) longer than an
    event id may be, refused as "event_id is missing or malformed", an option not given."""
    order, payment = paying_order(tenant, menu["pizza"])
    with pytest.raises(CommandError, match="--amount"):
        simulate(order.pk, "--amount", amount)
    assert ProviderConflict.all_tenants.filter(payment=payment).count() == 0
    payment.refresh_from_db()
    assert payment.status == payment.Status.PENDING

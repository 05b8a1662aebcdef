"""``manage.py simulate_payment``: the demo's stand-in for the provider."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

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

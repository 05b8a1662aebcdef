"""The TypeScript client (clients/typescript): its Node test suite against a live gunicorn, and
the generated API types checked against the schema the server publishes now.

Node cannot reach into pytest's fixtures, so this module hands them over: the server's and the
dropping proxy's addresses, and a small control endpoint on loopback through which the Node
tests inject the server-side faults (hold an order's row lock, fill a diner's rate-limit
window) and count rows in the database.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connections

from ordering.models import Payment
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient
from tests.clients.conftest import (
    LEASE_SECONDS,
    RowLock,
    Shop,
    exhaust_write_rate,
    forget_the_tokens_of,
    set_tenant_status,
)
from tests.support.fault_proxy import DroppingProxy
from tests.support.live_server import LiveServer

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "typescript"
NODE_TESTS = 57  # in clients/typescript/test/*.test.ts: fewer passing means some did not run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def npm() -> str:
    """npm, with the package's dev dependencies installed (``make test`` runs ``npm ci``)."""
    npm = shutil.which("npm")
    assert npm is not None, "npm is missing: make test installs it (scripts/ensure_services.sh)"
    assert (PACKAGE / "node_modules" / ".bin" / "tsc").exists(), (
        "run `npm ci` in clients/typescript (make test does)"
    )
    return npm


def _control_actions(
    shop: Shop, proxy: DroppingProxy, row_lock: RowLock
) -> dict[str, Callable[[dict[str, Any]], Any]]:
    return {
        "drop": lambda p: proxy.drop_responses(p["count"], method=p["method"], path=p["path"]),
        "answer-instead": lambda p: proxy.answer_instead(
            p["status"], p["count"], method=p["method"], path=p["path"]
        ),
        "dropped": lambda p: [
            {
                "status": d.status,
                "result": d.headers.get("x-idempotent-result"),
                "body": d.body.decode(),
            }
            for d in proxy.dropped
        ],
        "hold-order": lambda p: row_lock.hold(int(p["order_id"])),
        "release": lambda p: row_lock.release(),
        "exhaust-write-rate": lambda p: exhaust_write_rate(
            shop, p["diner_id"], for_ms=int(p["for_ms"])
        ),
        "orders-of": lambda p: {"count": shop.orders_of(p["diner_id"])},
        "forget-tokens": lambda p: {"count": forget_the_tokens_of(shop)},
        "tenant-status": lambda p: set_tenant_status(shop, p["status"]),
        "payments-of": lambda p: {
            "count": Payment.objects.for_tenant(shop.tenant)
            .filter(order_id=int(p["order_id"]))
            .count()
        },
    }


@pytest.fixture
def control_url(shop: Shop, proxy: DroppingProxy, row_lock: RowLock) -> Iterator[str]:
    actions = _control_actions(shop, proxy, row_lock)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            try:
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"] or 0)))
                body = json.dumps(actions[self.path.strip("/")](payload)).encode()
                self.send_response(200)
            except Exception as exc:  # the Node test prints it
                body = repr(exc).encode()
                self.send_response(500)
            finally:
                connections.close_all()  # this thread's database connection, if it opened one
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.django_db(transaction=True)
def test_the_typescript_client_passes_its_tests_against_a_live_server(
    client_server: LiveServer,
    client_server_database: LiveServer,
    proxy: DroppingProxy,
    control_url: str,
    shop: Shop,
    npm: str,
) -> None:
    env = {
        **os.environ,
        "API_URL": client_server.url,
        "DATABASE_ONLY_API_URL": client_server_database.url,
        "PROXY_URL": proxy.url,
        "CONTROL_URL": control_url,
        "PUBLISHABLE_KEY": shop.publishable_key,
        # the merchant's server, which revokes diners' sessions, and how long a revocation
        # takes to reach every worker
        "MERCHANT_KEY": issue_api_key(
            tenant=shop.tenant, name="merchant server", kind=ApiClient.Kind.MERCHANT
        )[1],
        "SESSION_STATE_CACHE_SECONDS": str(settings.DINER_SESSION_STATE_CACHE_SECONDS),
        "DISH_ID": str(shop.dish.pk),
        "LEASE_SECONDS": str(LEASE_SECONDS),
    }
    run = subprocess.run(
        [npm, "test"], cwd=PACKAGE, env=env, capture_output=True, text=True, timeout=300
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "# run by tests/clients" not in output, "the live tests were skipped:\n" + output
    passed = re.search(r"^\S+ pass (\d+)$", output, re.MULTILINE)
    failed = re.search(r"^\S+ fail (\d+)$", output, re.MULTILINE)
    assert passed and failed, output
    assert int(failed.group(1)) == 0 and int(passed.group(1)) >= NODE_TESTS, output


def test_the_committed_api_types_match_the_schema_the_server_publishes(npm: str) -> None:
    run = subprocess.run(
        ["node", "scripts/generate-types.mjs", "--check"],
        cwd=PACKAGE,
        # as a developer runs it: no DEBUG or secrets of the test run in the environment
        env={
            **{k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY")},
            "PYTHON": sys.executable,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_committed_api_types_do_not_depend_on_the_shell_s_deployment_settings(
    npm: str,
) -> None:
    """A developer's shell may hold a deployment's settings (README, "Run it in production"):
    a keyless window of 120 s, which the Idempotency-Key's description names, or the load
    test's BENCH_ENDPOINTS, which adds its routes. The types are the code's, not a deployment's
    (red: "is stale: the API schema changed", and `npm run generate` wrote them in)."""
    run = subprocess.run(
        ["node", "scripts/generate-types.mjs", "--check"],
        cwd=PACKAGE,
        env={
            **{k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY")},
            "PYTHON": sys.executable,
            "IDEMPOTENCY_AUTO_KEY_WINDOW": "120",
            "BENCH_ENDPOINTS": "1",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr

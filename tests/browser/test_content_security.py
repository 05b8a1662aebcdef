"""In a real browser: every page keeps the Content-Security-Policy (no blocked script or style,
so nothing relies on inline code), and the API docs render with no network beyond this site."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User

from tests.browser.test_dashboard import log_in, open_shop

pytestmark = [pytest.mark.browser, pytest.mark.slow]
LOCAL_HOSTS = {"127.0.0.1", "localhost"}


def watch(page) -> tuple[list[str], list[str]]:
    """Requests that tried to leave this machine (refused), and CSP violations reported."""
    outside: list[str] = []
    violations: list[str] = []

    def route(route) -> None:
        if urlsplit(route.request.url).hostname in LOCAL_HOSTS:
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", route)
    page.on(
        "console",
        lambda message: (
            "Content Security Policy" in message.text and violations.append(message.text)
        ),
    )
    return outside, violations


def test_the_api_docs_render_with_no_network(page, live_server):
    outside, violations = watch(page)

    page.goto(f"{live_server.url}/api/docs/")
    # Swagger UI fetched the schema (from this site) and drew the operations
    page.wait_for_selector(".opblock-summary-path[data-path='/api/v1/orders/']", timeout=20_000)

    assert outside == []
    assert violations == []
    scripts = page.eval_on_selector_all("script[src]", "nodes => nodes.map(n => n.src)")
    assert scripts and all(urlsplit(src).hostname in LOCAL_HOSTS for src in scripts)


def test_dashboard_pages_run_under_the_policy(page, live_server):
    shop = open_shop()
    outside, violations = watch(page)

    log_in(page, live_server.url, shop.owner.username)
    for path in ("/dashboard/", "/dashboard/menu/", "/dashboard/idempotency/"):
        response = page.goto(f"{live_server.url}{path}")
        assert "script-src 'self'" in response.headers["content-security-policy"]
    page.goto(f"{live_server.url}/dashboard/")
    # board.js, a script file of this site, ran and refreshed the board
    page.locator("#board-updated", has_text="Updated").wait_for(timeout=10_000)

    assert outside == [] and violations == []


def test_dashboard_pages_log_no_error_in_the_console(page, live_server):
    """Nothing a page loads fails, the browser's own request for the site's icon included
    (red: every page logged "Failed to load resource: … 404", /favicon.ico)."""
    open_shop()
    errors: list[str] = []
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    failed: list[str] = []
    page.on("response", lambda answer: answer.status >= 400 and failed.append(answer.url))

    log_in(page, live_server.url, "roma-owner")
    for path in ("/dashboard/menu/", "/dashboard/coupons/", "/dashboard/members/"):
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("networkidle")

    assert failed == [] and errors == []


def test_a_new_api_key_is_selected_for_copying_without_inline_script(page, live_server):
    """The page showing a key just issued selects it when it takes focus, ready to copy. Red:
    the field did it in an inline ``onfocus`` handler, which the policy blocks (a violation
    in the console, and the key left unselected)."""
    open_shop()
    outside, violations = watch(page)
    log_in(page, live_server.url, "roma-owner", "/dashboard/api-keys/")
    page.fill("#id_name", "POS")
    with page.expect_navigation():
        page.get_by_role("button", name="Create key").click()

    field = page.locator("#new-key-value")
    field.focus()
    key = field.input_value()
    selected = field.evaluate("f => f.value.slice(f.selectionStart, f.selectionEnd)")

    assert key.count(".") == 1
    assert selected == key
    assert page.locator("[onfocus], [onclick], [onload], [onchange], [onsubmit]").count() == 0
    assert outside == [] and violations == []


def test_the_admin_runs_under_the_policy(page, live_server):
    User.objects.create_superuser("root", password="pw-123456789")
    outside, violations = watch(page)

    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "root")
    page.fill("#id_password", "pw-123456789")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{live_server.url}/admin/")
    page.goto(f"{live_server.url}/admin/idempotency/luascriptversion/add/")

    assert outside == [] and violations == []

"""Headless Chromium (Debian's package) driven by Playwright against pytest-django's live server.

One browser per test module (not per session: Playwright's event loop, registered on the main
thread while it runs, would make Django refuse ORM calls in every test after it); each test gets
a fresh context (cookies, storage). Chromium comes from ``apt-get install chromium``
(``scripts/ensure_services.sh`` does it); without it these tests skip and say so.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
README_SHOTS = ROOT / "docs" / "screenshots"
VIEWPORT = {"width": 1366, "height": 860}


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not os.path.exists(CHROMIUM):
        pytest.skip(
            f"{CHROMIUM} is missing: install Debian's chromium "
            "(bash scripts/ensure_services.sh, or apt-get install chromium)"
        )
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an asyncio loop registered on this thread while it runs;
    # Django would then refuse the test's own (synchronous) ORM calls. Nothing here is async.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield chromium
            chromium.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser: object, settings: object) -> Iterator[object]:
    """A fresh browser tab with its own cookies; the board refreshes every second here."""
    settings.DASHBOARD_REFRESH_SECONDS = 1
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    context = browser.new_context(viewport=VIEWPORT, locale="en-GB", timezone_id="UTC")
    context.set_default_timeout(10_000)
    tab = context.new_page()
    yield tab
    context.close()


def screenshot(tab: object, name: str, *, readme: bool = False) -> Path:
    """Save under test-artifacts/ (gitignored). ``readme`` shots are the README's: run with
    UPDATE_README_SCREENSHOTS=1 to refresh docs/screenshots/ after a visual change."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    tab.screenshot(path=str(path), full_page=True)
    if readme and os.environ.get("UPDATE_README_SCREENSHOTS") == "1":
        README_SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, README_SHOTS / name)
    return path

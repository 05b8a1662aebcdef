"""The README's production instructions, as the tests run them.

The environment is read from the README itself (the ``export`` lines of "Run it in
production"), so a test that starts the app "as documented" breaks when the documentation and
the settings drift apart. ``<secret>`` placeholders become fresh random secrets; the database
and Redis are this test run's.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[2]
README = PROJECT_ROOT / "README.md"
SECTION = "## Run it in production"
PLACEHOLDER = "<secret>"
# A TLS-terminating proxy in front of gunicorn says so in this header (SECURE_PROXY_SSL_HEADER).
HTTPS_HEADERS = {"X-Forwarded-Proto": "https"}

_EXPORT = re.compile(r"^export (\w+)=('[^']*'|\S+)")
# What a process needs to run at all; everything else comes from the documented environment.
_SYSTEM_VARIABLES = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH")


def documented_environment() -> dict[str, str]:
    """Each variable the README's production block exports, with its value as written."""
    text = README.read_text("utf-8")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    found = (_EXPORT.match(line) for line in block.splitlines())
    return {m.group(1): m.group(2).strip("'") for m in found if m}


def production_environment(
    *, database_url: str | None = None, redis_url: str | None = None
) -> dict[str, str]:
    """The documented environment with fresh secrets and, when given, this run's services."""
    env = {
        name: secrets.token_urlsafe(50) if value == PLACEHOLDER else value
        for name, value in documented_environment().items()
    }
    if database_url is not None:
        env["DATABASE_URL"] = database_url
    if redis_url is not None:
        env["REDIS_URL"] = redis_url
    return env


def live_server_environment(*, redis_url: str) -> dict[str, str | None]:
    """The documented environment for a live gunicorn of the test suite: this run's database
    (``APP_DB_NAME`` names the test database) and ``redis_url``, DEBUG removed (the suite itself
    runs with DEBUG=1 and the server inherits the suite's environment)."""
    env: dict[str, str | None] = {
        **production_environment(database_url=os.environ["DATABASE_URL"], redis_url=redis_url)
    }
    env["DEBUG"] = None
    return env


def served_host(env: Mapping[str, str | None]) -> str:
    """The first documented host name: what requests to such a server must name in ``Host``."""
    return (env["ALLOWED_HOSTS"] or "").split(",")[0]


def guest_session_headers(client: Any, publishable_key: str) -> dict[str, str]:
    """Open a guest diner session on a live server as a diner's app does (its publishable key,
    an empty body), and the ``Authorization`` header that acts as that diner. The token is
    signed by the server itself, whatever its ``SECRET_KEY``."""
    opened = client.post(
        "/api/v1/diner-sessions/", headers={"Authorization": f"Api-Key {publishable_key}"}
    )
    assert opened.status_code == 201, opened.text
    return {"Authorization": f"Bearer {opened.json()['token']}"}


def system_environment() -> dict[str, str]:
    """The few variables of this process a child needs to run, and nothing that configures
    the app (the suite itself runs with ``DEBUG=1``)."""
    return {name: os.environ[name] for name in _SYSTEM_VARIABLES if name in os.environ}


def run_manage(
    *args: str, env: Mapping[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``manage.py <args>`` in a child with exactly ``env`` (plus the system variables)."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT_ROOT,
        env={**system_environment(), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )

"""Django's development server (``manage.py runserver``, what ``make run`` serves the demo with)
on pytest-django's test database, for the tests of what the demo does that gunicorn does not.

Like :mod:`tests.support.live_server`, it reaches the test database through ``APP_DB_NAME``, so
a test using it needs ``@pytest.mark.django_db(transaction=True)``. The server's output goes to
a file (``log_path``), read by tests about its request lines.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from django.conf import settings

from tests.support.ports import free_port
from tests.support.waiting import DEADLINE_SECONDS, wait_until


@dataclass(frozen=True)
class DevelopmentServer:
    url: str
    log_path: Path


@contextmanager
def development_server(log_path: Path) -> Iterator[DevelopmentServer]:
    """The development server on a free loopback port until the block ends (then stopped)."""
    port = free_port()
    env = {**os.environ, "DEBUG": "1", "APP_DB_NAME": settings.DATABASES["default"]["NAME"]}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
            cwd=Path(settings.BASE_DIR),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = DevelopmentServer(url=f"http://127.0.0.1:{port}", log_path=log_path)
    try:
        wait_until(
            lambda: httpx.get(f"{server.url}/healthz").status_code == 200,
            what="the development server",
            ignoring=(httpx.HTTPError,),
            detail=log_path.read_text,
        )
        yield server
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(DEADLINE_SECONDS)

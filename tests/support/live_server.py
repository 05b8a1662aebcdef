"""A real gunicorn (several worker processes) serving the app on pytest-django's test database.

Why: races between processes — two workers claiming one idempotency key, a worker killed mid
request — cannot happen inside one test client. This starts ``config.wsgi:application`` under
``config/gunicorn.py`` exactly as production does, on a free loopback port, pointed at the test
database through ``APP_DB_NAME`` (RECIPES §5), so a test writes rows, fires real HTTP requests
and asserts on the rows the workers committed. Such tests need
``@pytest.mark.django_db(transaction=True)``: the workers see only committed rows.

Two ways in:

- :func:`live_gunicorn`, a context manager, for a test that starts and stops a server itself
  (chaos tests that kill workers, benchmarks);
- :func:`gunicorn_fixture`, which makes a pytest fixture of it, for a server shared by a module
  or session::

      live_gunicorn_db = gunicorn_fixture("live_gunicorn_db", env={"REDIS_URL": ""})

gunicorn's error log (stdout and stderr) and an access log go to files in a pytest tmp dir; a
server that does not come up fails with the tail of its log. The access log names the worker
pid, status, ``Idempotency-Key`` and ``X-Idempotent-Result`` of every request
(:meth:`LiveServer.access_log`), so tests can see which processes answered without any
test-only code in the app.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from config.gunicorn import WORKER_READY_MESSAGE
from tests.support.ports import free_port
from tests.support.waiting import DEADLINE_SECONDS

PROJECT_ROOT = Path(__file__).resolve().parents[2]
GUNICORN_CONFIG = PROJECT_ROOT / "config" / "gunicorn.py"
READY_PATH = "/api/schema/"
STOP_TIMEOUT_SECONDS = 10.0

# Tab-separated: printable-ASCII values (keys may contain spaces) never contain a tab.
_ACCESS_FIELDS = ("pid", "method", "path", "status", "key", "result")
ACCESS_LOG_FORMAT = "\t".join(
    (
        "%(p)s",
        "%(m)s",
        "%(U)s",
        "%(s)s",
        "%({idempotency-key}i)s",
        "%({x-idempotent-result}o)s",
    )
)
_READY_RE = re.compile(re.escape(WORKER_READY_MESSAGE).replace("%s", r"(\d+)"))


class GunicornFailed(RuntimeError):
    """The server died or did not answer in time; the message ends with its log tail."""


@dataclass(frozen=True)
class AccessLogLine:
    """One answered request; ``key`` and ``result`` are ``"-"`` when the header was absent."""

    pid: int
    method: str
    path: str
    status: int
    key: str
    result: str


@dataclass(frozen=True)
class LiveServer:
    """A running gunicorn: its base URL, master process, worker pids and logs."""

    url: str
    worker_pids: frozenset[int]
    log_path: Path
    access_log_path: Path
    process: subprocess.Popen[bytes] = field(repr=False, compare=False)

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of gunicorn's error log (boot, worker exits, tracebacks)."""
        return _tail(self.log_path, lines)

    def access_log(self) -> list[AccessLogLine]:
        """Every request answered so far, oldest first."""
        if not self.access_log_path.exists():
            return []
        entries = []
        for raw in self.access_log_path.read_text().splitlines():
            values = dict(zip(_ACCESS_FIELDS, raw.split("\t"), strict=True))
            entries.append(
                AccessLogLine(
                    pid=int(values["pid"].strip("<>")),
                    method=values["method"],
                    path=values["path"],
                    status=int(values["status"]),
                    key=values["key"],
                    result=values["result"],
                )
            )
        return entries


@contextmanager
def live_gunicorn(
    *,
    db_name: str,
    log_dir: Path,
    env: Mapping[str, str | None] | None = None,
    workers: int = 4,
    ready_timeout: float = DEADLINE_SECONDS,
    extra_args: Sequence[str] = (),
    ready_headers: Mapping[str, str] | None = None,
    access_log_format: str | None = ACCESS_LOG_FORMAT,
) -> Iterator[LiveServer]:
    """Serve the app with ``workers`` sync workers on ``db_name`` until the block ends.

    ``env`` overrides the inherited environment (a value of None removes the variable), e.g.
    ``{"REDIS_URL": ""}`` runs the idempotency engine database-only. The block starts once
    every worker has loaded the app and ``GET /api/schema/`` answered 200; it ends with SIGTERM
    to the process group (workers run their ``worker_exit`` hook) and SIGKILL after 10 s.
    ``ready_headers`` go with the readiness request: a server off DEBUG answers only its
    ``ALLOWED_HOSTS`` and, behind its TLS proxy, only requests marked as HTTPS.
    ``access_log_format`` None writes the access log in the format ``config/gunicorn.py`` sets.
    """
    server = _start(
        db_name=db_name,
        log_dir=log_dir,
        env=env or {},
        workers=workers,
        ready_timeout=ready_timeout,
        extra_args=extra_args,
        ready_headers=ready_headers or {},
        access_log_format=access_log_format,
    )
    try:
        yield server
    finally:
        stop(server)


def stop(server: LiveServer) -> None:
    """SIGTERM the whole process group, SIGKILL it if it is still there after 10 s."""
    _stop_process_group(server.process, timeout=STOP_TIMEOUT_SECONDS)


def gunicorn_fixture(
    name: str,
    *,
    scope: Any = "module",
    env: Mapping[str, str | None] | None = None,
    workers: int = 4,
    ready_timeout: float = 20.0,
) -> Callable[..., Iterator[LiveServer]]:
    """A pytest fixture called ``name`` that yields a :class:`LiveServer` for ``scope``.

    It depends on ``django_db_setup``, so the test database exists before gunicorn starts and is
    dropped only after gunicorn stopped (PostgreSQL refuses to drop a database in use). Under
    xdist every worker gets its own database and therefore its own server.
    """

    @pytest.fixture(scope=scope, name=name)
    def fixture(
        django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[LiveServer]:
        from django.conf import settings

        with live_gunicorn(
            db_name=settings.DATABASES["default"]["NAME"],
            log_dir=tmp_path_factory.mktemp(name),
            env=env,
            workers=workers,
            ready_timeout=ready_timeout,
        ) as server:
            yield server

    return fixture


def _start(
    *,
    db_name: str,
    log_dir: Path,
    env: Mapping[str, str | None],
    workers: int,
    ready_timeout: float,
    extra_args: Sequence[str],
    ready_headers: Mapping[str, str],
    access_log_format: str | None = ACCESS_LOG_FORMAT,
) -> LiveServer:
    port = free_port()
    log_path = log_dir / "gunicorn.log"
    access_log_path = log_dir / "access.log"
    child_env = {
        **os.environ,
        "APP_DB_NAME": db_name,
        "PYTHONUNBUFFERED": "1",
        # Stopping must fit in STOP_TIMEOUT_SECONDS even with a request still running.
        "GUNICORN_GRACEFUL_TIMEOUT": "5",
    }
    for key, value in env.items():
        if value is None:
            child_env.pop(key, None)
        else:
            child_env[key] = value
    args = [
        sys.executable,
        "-m",
        "gunicorn",
        "--config",
        str(GUNICORN_CONFIG),
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--log-level",
        "info",
        "--access-logfile",
        str(access_log_path),
        *(["--access-logformat", access_log_format] if access_log_format else []),
        # gunicorn >= 25 opens a control socket at one fixed path per user by default; servers
        # running side by side (module fixtures, other test runs) would unlink each other's.
        "--no-control-socket",
        *extra_args,
    ]
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            args,
            cwd=PROJECT_ROOT,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so one signal reaches every worker
        )
    url = f"http://127.0.0.1:{port}"
    try:
        pids = _wait_until_ready(
            process,
            url=url,
            log_path=log_path,
            workers=workers,
            timeout=ready_timeout,
            headers=ready_headers,
        )
    except BaseException:
        _stop_process_group(process, timeout=STOP_TIMEOUT_SECONDS)
        raise
    return LiveServer(
        url=url,
        worker_pids=pids,
        log_path=log_path,
        access_log_path=access_log_path,
        process=process,
    )


def _wait_until_ready(
    process: subprocess.Popen[bytes],
    *,
    url: str,
    log_path: Path,
    workers: int,
    timeout: float,
    headers: Mapping[str, str],
) -> frozenset[int]:
    """Wait for every worker's "ready" line and a 200 from the schema; the worker pids."""
    deadline = time.monotonic() + timeout
    schema_ok = False
    with httpx.Client(base_url=url, timeout=2.0, headers=dict(headers)) as client:
        while True:
            if process.poll() is not None:
                raise GunicornFailed(
                    f"gunicorn exited with code {process.returncode} before it was ready; "
                    f"log tail ({log_path}):\n{_tail(log_path)}"
                )
            pids = frozenset(int(pid) for pid in _READY_RE.findall(_read(log_path)))
            if not schema_ok and pids:
                with suppress(httpx.TransportError):
                    schema_ok = client.get(READY_PATH).status_code == 200
            if schema_ok and len(pids) >= workers:
                return pids
            if time.monotonic() > deadline:
                raise GunicornFailed(
                    f"gunicorn not ready after {timeout:.0f} s ({len(pids)}/{workers} workers "
                    f"loaded the app, GET {READY_PATH} 200: {schema_ok}); "
                    f"log tail ({log_path}):\n{_tail(log_path)}"
                )
            time.sleep(0.05)


def _stop_process_group(process: subprocess.Popen[bytes], *, timeout: float) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _tail(path: Path, lines: int = 40) -> str:
    return "\n".join(_read(path).splitlines()[-lines:])

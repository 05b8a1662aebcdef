"""A throwaway PostgreSQL server that a test or benchmark owns: stop it, restart it, kill it.

Why: a fault run that restarts PostgreSQL must not disturb the shared server on 5432 that other
test runs use. This one is ``initdb``'d into a fresh temporary directory, listens on a free
loopback port only (no Unix socket outside its own directory), trusts every local connection,
and runs with ``fsync=off`` (its data is thrown away anyway). Everything is removed by
:meth:`PrivatePostgres.remove`, which a ``with`` block calls even on failure::

    with PrivatePostgres() as pg:
        pg.create_database("chaos")
        url = pg.url("chaos")          # postgres://postgres@127.0.0.1:<port>/chaos
        pg.restart()                   # pg_ctl restart -m fast: every connection is dropped

The binaries come from ``/usr/lib/postgresql/<newest>/bin`` (Debian's layout). ``initdb`` and
the server refuse to run as root, and tests run as root: they run as the ``postgres`` OS user
(``runuser``; ``setpriv`` when ``runuser`` is missing), and the directory is handed to it.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from contextlib import suppress
from pathlib import Path
from types import TracebackType

from tests.support.ports import free_port

OS_USER = "postgres"
DB_USER = "postgres"
HOST = "127.0.0.1"


class PostgresFailed(RuntimeError):
    """initdb or pg_ctl failed; the message ends with the server log's tail."""


def postgres_bin_dir() -> Path:
    """The newest ``/usr/lib/postgresql/<major>/bin`` that has ``initdb`` and ``pg_ctl``."""
    candidates = []
    for path in Path("/usr/lib/postgresql").glob("*/bin"):
        if (path / "initdb").exists() and (path / "pg_ctl").exists():
            major = re.match(r"\d+", path.parent.name)
            candidates.append((int(major.group()) if major else 0, path))
    if not candidates:
        raise PostgresFailed("no /usr/lib/postgresql/*/bin/initdb: apt-get install -y postgresql")
    return max(candidates)[1]


class PrivatePostgres:
    """One PostgreSQL server in a temporary directory, on a free loopback port."""

    def __init__(self, *, port: int | None = None, settings: dict[str, str] | None = None) -> None:
        self.port = port or free_port()
        self.bin = postgres_bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix=f"private-pg-{self.port}-"))
        self.data = self.root / "data"
        self.log_path = self.root / "server.log"
        self.settings = {
            "listen_addresses": HOST,
            "port": str(self.port),
            "unix_socket_directories": str(self.root),
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "200",
            "shared_buffers": "64MB",
            **(settings or {}),
        }
        self.restarts = 0
        self._initdb_done = False

    # --- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> PrivatePostgres:
        try:
            return self.start()
        except BaseException:
            self.remove()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()

    def start(self, timeout: float = 30.0) -> PrivatePostgres:
        """initdb (the first time), then start the server and wait until it accepts."""
        if not self._initdb_done:
            self._initdb()
        self._pg_ctl(
            "start",
            "-w",
            "-t",
            str(int(timeout)),
            "-l",
            str(self.log_path),
            "-o",
            self._options(),
            timeout=timeout + 10,
        )
        self.wait_ready(timeout)
        return self

    def stop(self, mode: str = "fast", timeout: float = 30.0) -> None:
        """``pg_ctl stop -m fast|immediate|smart``: every client connection is dropped."""
        if not self.running():
            return
        self._pg_ctl("stop", "-w", "-t", str(int(timeout)), "-m", mode, timeout=timeout + 10)

    def restart(self, mode: str = "fast", timeout: float = 30.0) -> None:
        """``pg_ctl restart -m fast``: drops every connection, comes back on the same port."""
        self._pg_ctl(
            "restart",
            "-w",
            "-t",
            str(int(timeout)),
            "-m",
            mode,
            "-l",
            str(self.log_path),
            "-o",
            self._options(),
            timeout=timeout + 10,
        )
        self.wait_ready(timeout)
        self.restarts += 1

    def remove(self) -> None:
        """Stop the server (SIGKILL as a last resort) and delete its directory."""
        with suppress(Exception):
            self.stop(mode="immediate", timeout=15)
        pid = self.postmaster_pid()
        if pid is not None:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)

    # --- state ----------------------------------------------------------------------------

    def postmaster_pid(self) -> int | None:
        try:
            first = (self.data / "postmaster.pid").read_text().split("\n", 1)[0]
            pid = int(first)
        except (OSError, ValueError):
            return None
        return pid if Path(f"/proc/{pid}").exists() else None

    def running(self) -> bool:
        return self.postmaster_pid() is not None

    def wait_ready(self, timeout: float = 30.0) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.conninfo("postgres"), connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise PostgresFailed(
                        f"PostgreSQL on :{self.port} not ready after {timeout:.0f} s:\n"
                        f"{self.log_tail()}"
                    ) from None
                time.sleep(0.1)

    # --- databases ------------------------------------------------------------------------

    def url(self, db_name: str) -> str:
        """A ``DATABASE_URL`` for dj-database-url."""
        return f"postgres://{DB_USER}@{HOST}:{self.port}/{db_name}"

    def conninfo(self, db_name: str) -> str:
        """A libpq connection string for psycopg."""
        return f"host={HOST} port={self.port} user={DB_USER} dbname={db_name}"

    def create_database(self, name: str) -> None:
        import psycopg

        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise ValueError(f"unsafe database name {name!r}")
        with psycopg.connect(self.conninfo("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    # --- internals ------------------------------------------------------------------------

    def _options(self) -> str:
        return " ".join(f"-c {k}={v}" for k, v in self.settings.items())

    def _initdb(self) -> None:
        self._hand_over(self.root)
        self._run(
            [
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "-U",
                DB_USER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
            timeout=120,
        )
        self._initdb_done = True

    def _pg_ctl(self, *args: str, timeout: float) -> None:
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.data), *args], timeout=timeout)

    def _run(self, cmd: list[str], *, timeout: float) -> None:
        proc = subprocess.run(
            _as_os_user(cmd),
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise PostgresFailed(
                f"{' '.join(cmd[:2])} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}\n"
                f"server log:\n{self.log_tail()}"
            )

    @staticmethod
    def _hand_over(path: Path) -> None:
        """Give the directory to the server's OS user (only when we run as root)."""
        if os.geteuid() != 0:
            return
        user = pwd.getpwnam(OS_USER)
        os.chown(path, user.pw_uid, user.pw_gid)
        path.chmod(0o700)


def _as_os_user(cmd: list[str]) -> list[str]:
    """Run ``cmd`` as the ``postgres`` OS user when we are root (initdb refuses root)."""
    if os.geteuid() != 0:
        return cmd
    if shutil.which("runuser"):
        return ["runuser", "-u", OS_USER, "--", *cmd]
    user = pwd.getpwnam(OS_USER)
    return [
        "setpriv",
        f"--reuid={user.pw_uid}",
        f"--regid={user.pw_gid}",
        "--init-groups",
        *cmd,
    ]

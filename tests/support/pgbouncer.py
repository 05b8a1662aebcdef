"""A real PgBouncer in transaction mode in front of the test database, configured as documented.

The configuration is the ``ini`` block after ``<!-- pgbouncer.ini -->`` in ``docs/scaling.md``
("Fleet setup"), read from the file at each start: the doc cannot drift from what is tested.
Only what a test run must own is changed: the listening port (a free one), the ``auth_file`` (a
file in the run's own directory), the ``[databases]`` target (the PostgreSQL server of the test
settings), no Unix socket, and statistics the test may read every second. Debian's
``pgbouncer`` refuses to run as root, so as root it is started with ``-u postgres`` (it drops to
that user).
"""

from __future__ import annotations

import configparser
import io
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SCALING_DOC = PROJECT_ROOT / "docs" / "scaling.md"
MARKER = "<!-- pgbouncer.ini -->"
START_DEADLINE_SECONDS = 30.0


def documented_config() -> configparser.ConfigParser:
    """The ``pgbouncer.ini`` that ``docs/scaling.md`` documents."""
    text = SCALING_DOC.read_text()
    assert MARKER in text, f"{SCALING_DOC} lost its {MARKER} marker"
    match = re.search(r"```ini\n(.*?)```", text[text.index(MARKER) :], re.DOTALL)
    assert match is not None, f"no ```ini block after {MARKER} in {SCALING_DOC}"
    config = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    config.optionxform = str  # type: ignore[assignment,method-assign]  # keep names as written
    config.read_string(match.group(1))
    return config


@dataclass(frozen=True)
class PgBouncer:
    port: int
    user: str
    log_path: Path

    def url(self, dbname: str) -> str:
        """A ``DATABASE_URL`` that reaches ``dbname`` through this PgBouncer."""
        return f"postgres://{self.user}@127.0.0.1:{self.port}/{dbname}"

    def wait_for_transactions(self, dbname: str, *, more_than: int, timeout: float = 30.0) -> int:
        """The pooled transactions of ``dbname`` once they pass ``more_than`` (the statistics
        are refreshed every ``stats_period``), or the last count after ``timeout``."""
        deadline = time.monotonic() + timeout
        while (count := self.transactions(dbname)) <= more_than and time.monotonic() < deadline:
            time.sleep(0.2)
        return count

    def transactions(self, dbname: str) -> int:
        """How many transactions PgBouncer has pooled for ``dbname`` (its ``SHOW STATS``)."""
        with psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user=self.user,
            dbname="pgbouncer",
            autocommit=True,
            cursor_factory=psycopg.ClientCursor,  # the admin console speaks the simple protocol
        ) as admin:
            cursor = admin.execute("SHOW STATS")
            columns = [c.name for c in cursor.description or ()]
            for row in cursor.fetchall():
                stats = dict(zip(columns, row, strict=True))
                if stats["database"] == dbname:
                    return int(stats["total_xact_count"])
        return 0


@contextmanager
def running_pgbouncer(
    *, workdir: Path, port: int, server_host: str, server_port: int, user: str
) -> Iterator[PgBouncer]:
    """PgBouncer with the documented configuration on ``127.0.0.1:port`` in front of
    ``server_host:server_port``, until the block ends (SIGTERM, then SIGKILL)."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    workdir.mkdir(parents=True, exist_ok=True)
    workdir.chmod(0o755)  # readable by the user PgBouncer drops to
    auth_file = workdir / "userlist.txt"
    auth_file.write_text(f'"{user}" ""\n')
    auth_file.chmod(0o644)
    config = documented_config()
    config["databases"]["*"] = f"host={server_host} port={server_port}"
    config["pgbouncer"].update(
        {
            "listen_port": str(port),
            "auth_file": str(auth_file),
            "unix_socket_dir": "",
            # the test reads SHOW STATS from the admin console, refreshed every second
            "stats_users": user,
            "stats_period": "1",
        }
    )
    ini = workdir / "pgbouncer.ini"
    buffer = io.StringIO()
    config.write(buffer)
    ini.write_text(buffer.getvalue())
    ini.chmod(0o644)
    as_user = ["-u", "postgres"] if os.geteuid() == 0 else []
    log_path = workdir / "pgbouncer.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [binary, *as_user, str(ini)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    bouncer = PgBouncer(port=port, user=user, log_path=log_path)
    try:
        _wait_until_ready(process, bouncer)
        yield bouncer
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def _wait_until_ready(process: subprocess.Popen[bytes], bouncer: PgBouncer) -> None:
    deadline = time.monotonic() + START_DEADLINE_SECONDS
    while True:
        if process.poll() is not None:
            raise RuntimeError(
                f"pgbouncer exited with {process.returncode}:\n{bouncer.log_path.read_text()}"
            )
        try:
            bouncer.transactions("-")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)

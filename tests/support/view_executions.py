"""Count view executions across a live server's processes: the engine's ``VIEW_EXECUTED_HOOK``.

A storm's promise is about *executions*, not rows: the record's unique index keeps one row even
when several duplicates ran the view and were rolled back. So a live server started with

    IDEMPOTENCY_VIEW_EXECUTED_HOOK=tests.support.view_executions.record
    VIEW_EXECUTIONS_LOG=/path/to/file

appends one line per view execution to that file (and, with ``VIEW_EXECUTIONS_DELAY_SECONDS``,
then holds the view that long: the first execution is still running, inside its transaction,
when the duplicates arrive or when a test kills Redis; with ``VIEW_EXECUTIONS_GATE``, until
that file exists: a test acts on the held view, then lets it go). ``O_APPEND`` writes of one
short line are atomic on a local file system, so the workers of a gunicorn (processes or
threads) never interleave; nothing goes through Redis (which a test may kill) or the database
(whose transaction may roll back).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.waiting import wait_until

LOG_ENV = "VIEW_EXECUTIONS_LOG"
DELAY_ENV = "VIEW_EXECUTIONS_DELAY_SECONDS"
GATE_ENV = "VIEW_EXECUTIONS_GATE"
HOOK = "tests.support.view_executions.record"


@dataclass(frozen=True)
class Execution:
    tenant: str
    endpoint: str
    key: str
    pid: int


def record(*, tenant: str, endpoint: str, key: str) -> None:
    # Keys are printable ASCII (no tab, no newline): one field each.
    line = f"{tenant}\t{endpoint}\t{key}\t{os.getpid()}\n".encode()
    fd = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    time.sleep(float(os.environ.get(DELAY_ENV) or 0))
    gate = os.environ.get(GATE_ENV)
    if gate:
        wait_until(Path(gate).exists, what=f"the gate {gate} opened", interval=0.02)


def executions(log: Path, *, key: str) -> list[Execution]:
    """Every execution of ``key`` the server recorded so far."""
    if not log.exists():
        return []
    rows = (line.split("\t") for line in log.read_text().splitlines())
    return [Execution(tenant=t, endpoint=e, key=k, pid=int(p)) for t, e, k, p in rows if k == key]


def server_env(log: Path, *, hold_seconds: float = 0.0, gate: Path | None = None) -> dict[str, str]:
    """The environment that makes a live server record its executions into ``log`` (and hold
    each view ``hold_seconds``, then until the file ``gate`` exists)."""
    env = {"IDEMPOTENCY_VIEW_EXECUTED_HOOK": HOOK, LOG_ENV: str(log), DELAY_ENV: str(hold_seconds)}
    if gate is not None:
        env[GATE_ENV] = str(gate)
    return env

"""An operator's command while PostgreSQL is down ends in one line and exit status 1
(config/command_line.py), run as the README's production instructions set the environment."""

from __future__ import annotations

import os
import socket

import pytest

from tests.support.production import production_environment, run_manage


def closed_port() -> int:
    """A loopback port nothing listens on: PostgreSQL there refuses every connection."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(
    "command",
    [
        ["dead_letters"],
        ["purge_expired_data"],
        ["offboard_tenant", "trattoria", "--export", "/nonexistent/trattoria.zip"],
        ["migrate", "--noinput"],
    ],
    ids=["dead_letters", "purge_expired_data", "offboard_tenant", "migrate"],
)
def test_a_command_while_postgresql_is_down_says_so_in_one_line(command: list[str]) -> None:
    """It printed psycopg's traceback, pages of Python for an outage."""
    # given PostgreSQL refusing connections
    env = production_environment(
        database_url=f"postgres://postgres@127.0.0.1:{closed_port()}/ordering",
        redis_url=os.environ["REDIS_URL"],
    )
    # when the operator runs the command
    ran = run_manage(*command, env=env)
    # then it ends with status 1 and one line naming the outage and what to do
    assert ran.returncode == 1, ran.stdout
    assert "Traceback" not in ran.stderr, ran.stderr
    problem = [line for line in ran.stderr.splitlines() if not line.startswith('{"ts"')]
    assert len(problem) == 1, ran.stderr
    assert problem[0].startswith("DatabaseUnavailable: PostgreSQL did not answer (")
    assert "run it again once the database answers" in problem[0]


def test_the_traceback_is_kept_when_asked_for() -> None:
    env = production_environment(
        database_url=f"postgres://postgres@127.0.0.1:{closed_port()}/ordering",
        redis_url=os.environ["REDIS_URL"],
    )
    ran = run_manage("dead_letters", "--traceback", env=env)
    assert ran.returncode == 1
    assert "Traceback" in ran.stderr

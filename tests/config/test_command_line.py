"""An operator's command while PostgreSQL is down ends in one line and exit status 1
(config/command_line.py), run as the README's production instructions set the environment."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from django.conf import settings

from tests.support.production import (
    PROJECT_ROOT,
    production_environment,
    run_manage,
    system_environment,
)


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


@pytest.mark.parametrize("command", [["check"], ["migrate", "--noinput"]], ids=["check", "migrate"])
def test_a_command_with_a_refused_setting_says_why_in_one_line(command: list[str]) -> None:
    """A setting that stops the server stopped every command too, in a traceback through
    Django's settings machinery with the reason at its end; now in that one line, exit 1."""
    # given a Redis URL that names no node
    env = {
        **production_environment(redis_url="redis.example.com:6379"),
        "CELERY_BROKER_URL": "redis://broker.example.com:6379/1",
    }
    # when the operator runs a command
    ran = run_manage(*command, env=env)
    # then it ends with status 1 and the one line of the refusal
    assert ran.returncode == 1, ran.stdout
    assert "Traceback" not in ran.stderr, ran.stderr
    problem = [line for line in ran.stderr.splitlines() if not line.startswith('{"ts"')]
    assert problem == [
        "ImproperlyConfigured: REDIS_URL must be redis://host:port/<database number>, "
        "not 'redis.example.com:6379'"
    ], ran.stderr


@pytest.mark.parametrize("program", ["worker", "beat"])
def test_a_celery_process_with_a_refused_setting_says_why_in_one_line(program: str) -> None:
    """``celery -A config worker`` (and ``beat``), as docs/payments-and-saga.md starts them,
    stopped on a refused setting in some ninety lines of click's and Django's machinery, the
    reason at the end; now that one line, exit 1, as ``manage.py`` and gunicorn do."""
    # given a Redis URL that names no node
    env = {
        **production_environment(redis_url="redis.example.com:6379"),
        "CELERY_BROKER_URL": "redis://broker.example.com:6379/1",
    }
    # when the operator starts the worker or beat
    ran = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "config", program, "--loglevel", "INFO"],
        cwd=PROJECT_ROOT,
        env={**system_environment(), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    # then it ends with status 1 and the one line of the refusal
    assert ran.returncode == 1, ran.stdout
    assert "Traceback" not in ran.stderr, ran.stderr
    assert ran.stderr.splitlines() == [
        "ImproperlyConfigured: REDIS_URL must be redis://host:port/<database number>, "
        "not 'redis.example.com:6379'"
    ], ran.stderr


def test_a_refused_setting_s_traceback_is_kept_when_asked_for() -> None:
    env = production_environment(redis_url="redis.example.com:6379")

    ran = run_manage("check", "--traceback", env=env)

    assert ran.returncode == 1
    assert "Traceback" in ran.stderr


def test_output_to_a_reader_that_stopped_ends_in_one_line(db: None) -> None:
    """``manage.py purge_expired_data | head -0``: it ended in a BrokenPipeError traceback."""
    # given the documented environment on this run's database
    env = production_environment(
        database_url=os.environ["DATABASE_URL"], redis_url=os.environ["REDIS_URL"]
    )
    env["APP_DB_NAME"] = settings.DATABASES["default"]["NAME"]
    # when its output goes to a pipe whose reader has gone
    reader, writer = os.pipe()
    os.close(reader)
    try:
        ran = subprocess.run(
            [sys.executable, "manage.py", "purge_expired_data"],
            cwd=PROJECT_ROOT,
            env={**system_environment(), **env},
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(writer)
    # then it says so in one line, with status 1
    assert ran.returncode == 1, ran.stderr
    assert "Traceback" not in ran.stderr and "Exception ignored" not in ran.stderr, ran.stderr
    problem = [line for line in ran.stderr.splitlines() if not line.startswith('{"ts"')]
    assert problem == [
        "BrokenPipe: the output was closed before the command finished writing it; "
        "what it did stays done"
    ]

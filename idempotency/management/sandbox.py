"""Where ``check_lua_version`` runs the contract suite: a Redis server and a database of its own.

The contract suite empties Redis databases and writes records, audits and leases; run against
the site's own Redis and database it would destroy every tenant's stored replies and tokens.
So the gate starts an ephemeral ``redis-server`` on a free loopback port (no persistence, its
own temporary directory) and creates a throwaway PostgreSQL database on the configured server,
and removes both afterwards. Where either is impossible it refuses with :class:`CannotIsolate`
instead of falling back to the live ones.
"""

from __future__ import annotations

import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import redis
from django.db import DatabaseError, connections

START_DEADLINE_SECONDS = 15.0


class CannotIsolate(Exception):
    """The contract suite cannot run away from live data here; the message says why."""


@dataclass(frozen=True)
class EphemeralRedis:
    port: int

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


@contextmanager
def ephemeral_redis(
    binary: str | None = None, *, port: int | None = None
):  # -> Iterator[EphemeralRedis]
    """A ``redis-server`` on 127.0.0.1 that only this run knows, stopped on exit (on a free
    port, or on ``port``: a test restarting a server where its clients expect it)."""
    path = shutil.which(binary or "redis-server")
    if path is None:
        raise CannotIsolate(
            f"no {binary or 'redis-server'} binary on PATH: the contract suite needs a Redis "
            "server of its own and never runs against the configured one "
            "(install redis-server, or pass --redis-server PATH)"
        )
    workdir = tempfile.mkdtemp(prefix="idem-contract-redis-")
    process: subprocess.Popen[bytes] | None = None
    try:
        port = port or _free_port()
        process = subprocess.Popen(
            [
                path,
                *("--bind", "127.0.0.1", "--port", str(port), "--protected-mode", "yes"),
                *("--save", "", "--appendonly", "no", "--dir", workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_for_ping(port, process)
        yield EphemeralRedis(port=port)
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


@contextmanager
def throwaway_database(alias: str = "default"):  # -> Iterator[str]
    """Create a new, empty PostgreSQL database beside ``alias``'s and yield its URL; drop it on
    exit. The configured database itself is never connected to by the run."""
    settings_dict = connections[alias].settings_dict
    if connections[alias].vendor != "postgresql":
        raise CannotIsolate(
            f"the {alias!r} database is {connections[alias].vendor}, not PostgreSQL: the "
            "contract suite needs a PostgreSQL server on which it may create a database"
        )
    name = f"idem_contract_{secrets.token_hex(6)}"
    maintenance = None
    try:
        maintenance = _maintenance_connection(alias)
        with maintenance.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
    except DatabaseError as exc:
        if maintenance is not None:
            maintenance.close()
        raise CannotIsolate(
            f"cannot create a throwaway database as {settings_dict.get('USER')!r} "
            f"({str(exc).strip()}): the contract suite never runs against the configured "
            "database; grant CREATEDB to that role or run the check as one that has it"
        ) from exc
    try:
        yield _url(settings_dict, name)
    finally:
        try:
            with maintenance.cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            maintenance.close()


def _maintenance_connection(alias: str) -> Any:
    """A connection of its own to the server's ``postgres`` database (as Django's test runner
    does to create test databases), outside any transaction of the caller."""
    wrapper = connections[alias]
    maintenance = wrapper.__class__({**wrapper.settings_dict, "NAME": "postgres"}, alias=alias)
    maintenance.ensure_connection()
    maintenance.connection.autocommit = True
    return maintenance


def _url(settings_dict: dict[str, Any], name: str) -> str:
    user = quote(settings_dict.get("USER") or "", safe="")
    password = quote(settings_dict.get("PASSWORD") or "", safe="")
    credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or 5432
    return f"postgres://{credentials}{host}:{port}/{name}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_ping(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_DEADLINE_SECONDS
    while True:
        if process.poll() is not None:
            raise CannotIsolate(f"redis-server exited ({process.returncode}) on port {port}")
        try:
            with redis.Redis(port=port, socket_timeout=1) as client:
                if client.ping():
                    return
        except redis.ConnectionError:
            pass
        if time.monotonic() > deadline:
            raise CannotIsolate(f"redis-server did not answer on port {port}")
        time.sleep(0.05)

"""What config/gunicorn.py's hooks do in a worker, and how it reads its settings."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from config.gunicorn import child_exit, post_worker_init
from tests.support.ports import free_port
from tests.support.waiting import DEADLINE_SECONDS, wait_until

ROOT = Path(__file__).resolve().parents[2]


def test_a_worker_freezes_what_loading_the_app_made_then_says_it_is_ready():
    # given a worker that has loaded the app, nothing frozen yet
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    alive = len(gc.get_objects())
    logged: list[str] = []
    worker = SimpleNamespace(
        pid=4321, log=SimpleNamespace(info=lambda message, *args: logged.append(message % args))
    )
    try:
        # when gunicorn calls the hook
        post_worker_init(worker)
        # then the objects alive are out of the collector's generations (a full collection
        # no longer walks them), and the worker says it can answer
        assert gc.get_freeze_count() >= alive
        assert len(gc.get_objects()) < alive // 10
        assert logged == ["Worker ready (pid: 4321)"]
    finally:
        gc.unfreeze()


@pytest.mark.parametrize(
    ("name", "value", "low"),
    [("GUNICORN_WORKERS", "x", 1), ("GUNICORN_WORKERS", "0", 1), ("GUNICORN_TIMEOUT", "30s", 1)],
)
def test_a_setting_that_is_no_whole_number_stops_gunicorn_naming_it(name, value, low):
    """A bare int() stopped gunicorn with "invalid literal for int()", naming no setting."""
    read = _read_config({name: value})
    assert read.returncode != 0
    assert f"{name} must be a whole number of at least {low}, not {value!r}" in read.stderr
    assert "invalid literal" not in read.stderr


def test_the_settings_left_unset_or_empty_take_their_defaults():
    read = _read_config(
        {"GUNICORN_TIMEOUT": "", "GUNICORN_KEEPALIVE": "0"}, "g.timeout, g.keepalive"
    )
    assert (read.returncode, read.stdout.split()) == (0, ["30", "0"]), read.stderr


@pytest.mark.parametrize(
    ("value", "bind"),
    [
        pytest.param("", ["127.0.0.1:8000"], id="empty"),
        pytest.param("  ", ["127.0.0.1:8000"], id="blank"),
        pytest.param("10.0.0.5:8000,", ["10.0.0.5:8000"], id="trailing-comma"),
        pytest.param(
            " 10.0.0.5:8000 , unix:/run/o.sock", ["10.0.0.5:8000", "unix:/run/o.sock"], id="two"
        ),
    ],
)
def test_the_bind_address_left_empty_is_loopback_never_every_interface(value, bind):
    """GUNICORN_BIND set empty (or an address list with a trailing comma) handed gunicorn an
    empty address, which it binds to 0.0.0.0:8000: every interface of the host, the API, the
    dashboard and the admin reachable from anywhere past the proxy, where the default is
    loopback."""
    read = _read_config({"GUNICORN_BIND": value, "TRUSTED_PROXIES": "unix"}, "g.bind")
    assert (read.returncode, read.stdout.strip()) == (0, str(bind)), read.stderr


@pytest.mark.parametrize("trusted", ["", "10.0.0.2"], ids=["unset", "another-proxy"])
def test_a_unix_socket_whose_proxy_is_not_trusted_stops_gunicorn_naming_it(trusted):
    """gunicorn gives a request over a unix socket no address: without the entry "unix" in
    TRUSTED_PROXIES every diner and merchant behind the proxy was the one address "", so the
    site's guests shared one address's 20 sessions a minute, and five wrong passwords from
    anyone locked a merchant out for everyone (red: gunicorn started)."""
    read = _read_config({"GUNICORN_BIND": "unix:/run/o.sock", "TRUSTED_PROXIES": trusted})
    assert read.returncode != 0
    assert "GUNICORN_BIND names a unix socket: TRUSTED_PROXIES must hold unix" in read.stderr

    trusting = {"GUNICORN_BIND": "unix:/run/o.sock", "TRUSTED_PROXIES": f"{trusted},unix"}
    read = _read_config(trusting, "g.bind")
    assert (read.returncode, read.stdout.strip()) == (0, "['unix:/run/o.sock']"), read.stderr


def test_the_log_settings_left_empty_take_their_defaults():
    """``GUNICORN_ERROR_LOG=`` named the file "", and gunicorn stopped with "Error: '' isn't
    writable"; ``GUNICORN_LOG_LEVEL=`` was a level of no name."""
    read = _read_config(
        {"GUNICORN_ERROR_LOG": " ", "GUNICORN_LOG_LEVEL": ""}, "g.errorlog, g.loglevel"
    )
    assert (read.returncode, read.stdout.split()) == (0, ["-", "info"]), read.stderr


def test_a_log_level_gunicorn_does_not_know_stops_it_naming_the_setting():
    """gunicorn reads a level it does not know as info: ``GUNICORN_LOG_LEVEL=warn`` (or
    ``debgu``) ran a server that logged otherwise than asked, and said nothing."""
    read = _read_config({"GUNICORN_LOG_LEVEL": "warn"})
    assert read.returncode != 0
    assert (
        "GUNICORN_LOG_LEVEL must be one of debug, info, warning, error, critical, not 'warn'"
        in read.stderr
    )


def test_a_dead_worker_s_open_breaker_leaves_the_merged_gauge(tmp_path, monkeypatch):
    """``idempotency_breaker_state`` is merged over the workers as the worst one's; a worker
    that died (``max_requests``, a timeout, a restart) while its breaker was open kept the
    merged value at open for as long as the server ran, and ``RedisBreakerOpen`` paged for a
    node that every live worker used again."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    # given a worker that saw the node fail, then died
    dead = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os; from idempotency import metrics; "
            "metrics.breaker_changed('redis-a:6379/0', 'open'); print(os.getpid())",
        ],
        cwd=ROOT,
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    # and a live one whose breaker is closed
    live = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from idempotency import metrics; "
            "metrics.breaker_changed('redis-a:6379/0', 'closed'); print('set', flush=True); "
            "sys.stdin.read()",
        ],
        cwd=ROOT,
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert live.stdout is not None and live.stdout.readline() == "set\n"
        # when gunicorn's master reaps the dead one
        child_exit(SimpleNamespace(), SimpleNamespace(pid=int(dead.stdout)))
        # then the scrape shows the live worker's breaker, closed
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(tmp_path))
        states = [
            s.value
            for family in registry.collect()
            if family.name == "idempotency_breaker_state"
            for s in family.samples
        ]
        assert states == [0.0]
    finally:
        live.communicate(input="", timeout=60)


def test_a_stopped_server_leaves_no_metrics_directory_behind(tmp_path):
    """gunicorn makes a fresh directory for its workers' metrics files at every start; the
    master removes it as it stops (red: never removed, every restart, a deploy or a crash
    loop, left another ordering-metrics-* directory with its workers' files in /tmp)."""
    with _serving(tmp_path):
        [made] = tmp_path.glob("ordering-metrics-*")
        assert made.is_dir()
    assert list(tmp_path.glob("ordering-metrics-*")) == []


def test_a_server_reloaded_then_stopped_leaves_no_metrics_directory_behind(tmp_path):
    """A reload (SIGHUP: new workers, the configuration read again) runs config/gunicorn.py
    afresh in the master, which forgot the directory it had made: stopped afterwards, the
    master left it behind with every worker's files (red: the directory is still there)."""
    with _serving(tmp_path) as (server, health):
        first_workers = _children(server.pid)
        assert first_workers
        [made] = tmp_path.glob("ordering-metrics-*")
        # when the server is reloaded, and its new worker answers
        server.send_signal(signal.SIGHUP)
        wait_until(
            lambda: (
                _children(server.pid).isdisjoint(first_workers)
                and _children(server.pid)
                and _answers(health)
            ),
            what="the reloaded server's new worker answers",
        )
        assert made.is_dir()
    # then stopping it removes the directory it made at its start
    assert list(tmp_path.glob("ordering-metrics-*")) == []


@contextmanager
def _serving(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """gunicorn with config/gunicorn.py, one worker, its temporary files in ``tmp_path``,
    until the block ends (SIGTERM; it must exit cleanly): the process and its health URL."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "PROMETHEUS_MULTIPROC_DIR": ""}
    port = free_port()
    command = [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.py", "--workers", "1"]
    server = subprocess.Popen(
        [*command, "--bind", f"127.0.0.1:{port}", "--no-control-socket"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    health = f"http://127.0.0.1:{port}/healthz"
    try:
        wait_until(lambda: _answers(health), what="the server answers")
        yield server, health
    finally:
        server.terminate()
        assert server.wait(timeout=DEADLINE_SECONDS) == 0


def _read_config(env: dict[str, str], printed: str = "") -> subprocess.CompletedProcess[str]:
    """config/gunicorn.py read in a fresh interpreter with ``env`` added to the environment,
    printing ``printed`` (its values, e.g. ``"g.timeout, g.keepalive"``) when given."""
    code = f"import config.gunicorn as g; print({printed})" if printed else "import config.gunicorn"
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _children(pid: int) -> set[int]:
    """The live child processes of ``pid`` (Linux's /proc)."""
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return {int(child) for child in text.split()}

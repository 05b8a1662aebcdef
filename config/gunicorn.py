"""gunicorn settings for the API: ``gunicorn -c config/gunicorn.py``.

Used by production and by the test suite's live server (``tests/support/live_server.py``), which
overrides bind and workers on the command line. Every value can be set from the environment so
one file serves every deployment; command-line options win over this file.

Why a config module and not just flags: the ``worker_exit`` hook gives a worker's order-ID worker
id back when the worker stops (a restart, a scale-down, ``max_requests``), instead of keeping one
of the few ids out of use for a whole lease length (``ordering/worker_ids.py``); and the
``post_worker_init`` hook takes what loading the app made out of the garbage collector's reach.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import shutil
import sys
import tempfile
from typing import Any


def _env_int(name: str, default: int, *, low: int) -> int:
    """A whole-number setting of at least ``low``; unset or empty, ``default``. Anything else
    stops gunicorn with a message naming the setting (a bare ``int()`` named none)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if value < low:
        raise RuntimeError(f"{name} must be a whole number of at least {low}, not {raw!r}")
    return value


wsgi_app = "config.wsgi:application"


def _bind_addresses(default: str) -> list[str]:
    """``GUNICORN_BIND``'s addresses, comma-separated; unset, empty or blank, ``default``. An
    empty entry is dropped, never handed on: gunicorn binds an empty address to 0.0.0.0:8000,
    every interface of the host, so ``GUNICORN_BIND=`` (or a trailing comma) served the site
    past the proxy to anyone who could reach the host, where the default is loopback."""
    entries = [entry.strip() for entry in os.environ.get("GUNICORN_BIND", "").split(",")]
    return [entry for entry in entries if entry] or [default]


def _refuse_a_unix_socket_whose_proxy_is_not_trusted(addresses: list[str]) -> None:
    """Stop gunicorn when it is to listen on a unix socket and ``TRUSTED_PROXIES`` does not
    hold ``unix``, the entry for the proxy on it (``config/client_address.py``).

    gunicorn gives a request over a unix socket no address, so without the entry every diner
    and merchant behind the proxy was the one address "": the site's guests shared one
    address's sessions a minute, and five wrong passwords from anyone locked a merchant out
    of the dashboard for everyone. Only this host's processes reach the socket: the proxy."""
    trusted = [entry.strip() for entry in os.environ.get("TRUSTED_PROXIES", "").split(",")]
    if any(address.startswith("unix:") for address in addresses) and "unix" not in trusted:
        raise RuntimeError(
            "GUNICORN_BIND names a unix socket: TRUSTED_PROXIES must hold unix, the proxy on "
            "it (e.g. TRUSTED_PROXIES=unix), or every client is one address to the limits"
        )


bind = _bind_addresses("127.0.0.1:8000")
_refuse_a_unix_socket_whose_proxy_is_not_trusted(bind)
worker_class = "sync"
# gunicorn's rule of thumb for sync workers. Every worker that places orders leases one of the
# 128 order-ID worker ids (ordering/worker_ids.py): keep workers x hosts within the capacity plan
# in docs/scaling.md (Celery workers place no orders and hold none).
workers = _env_int("GUNICORN_WORKERS", 2 * multiprocessing.cpu_count() + 1, low=1)
# A request running longer than this is killed (and its worker replaced); the idempotency
# engine rolls its transaction back and the key's lease lets the client retry.
timeout = _env_int("GUNICORN_TIMEOUT", 30, low=1)
# On SIGTERM, workers finish their current request for up to this long before being killed.
graceful_timeout = _env_int("GUNICORN_GRACEFUL_TIMEOUT", 30, low=0)
keepalive = _env_int("GUNICORN_KEEPALIVE", 2, low=0)
backlog = _env_int("GUNICORN_BACKLOG", 2048, low=1)
accesslog = os.environ.get("GUNICORN_ACCESS_LOG") or None
# Off by default. When on, each line holds the time, the request line as sent, the status, the
# size and the milliseconds taken: not gunicorn's default format, which adds the client's
# address, its referer and its user agent, personal data a request's own log lines leave out.
access_log_format = '%(t)s "%(r)s" %(s)s %(b)s %(M)sms'
# Left empty, stderr ("-"): an empty name was a file gunicorn could not open.
errorlog = os.environ.get("GUNICORN_ERROR_LOG", "").strip() or "-"
_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "").strip().lower() or "info"
if loglevel not in _LOG_LEVELS:  # gunicorn reads any other as info, and says nothing
    raise RuntimeError(
        f"GUNICORN_LOG_LEVEL must be one of {', '.join(_LOG_LEVELS)}, "
        f"not {os.environ['GUNICORN_LOG_LEVEL']!r}"
    )
# Whether a request came over HTTPS is Django's to decide, from the one header the proxy sets
# (SECURE_PROXY_SSL_HEADER). gunicorn would otherwise mark a request HTTPS itself on any of
# X-Forwarded-Proto, -Ssl or -Protocol from a loopback address, which a client can send through
# a proxy that passes them on.
secure_scheme_headers: dict[str, str] = {}
# Nor may a client say where the site is mounted: gunicorn takes a SCRIPT_NAME header (its
# default forwarder_headers) from loopback or a unix socket, so through a proxy on this host that
# passes it on, "SCRIPT_NAME: /x" made /x/readyz the readiness probe the proxy keeps from the
# internet, and /x/api/v1/... an API path to every check that reads the path (no-store, JSON
# bodies only, the admin's row keys). The site is served at the root; the header is dropped.
forwarder_headers = ""  # none (gunicorn reads the setting as comma-separated names)
# gunicorn's control socket sits at one path per user by default, so a second server on the
# host takes it over (and removes it when it stops): off unless a path is given.
control_socket = os.environ.get("GUNICORN_CONTROL_SOCKET", "")
control_socket_disable = not control_socket


# Logged once a worker has loaded the app and can answer; the test suite's live server waits for
# one such line per worker so that every worker takes part in a storm from its first request.
WORKER_READY_MESSAGE = "Worker ready (pid: %s)"


def post_worker_init(worker: Any) -> None:
    """Freeze what loading the app made, then say that this worker can answer (gunicorn's own
    "Booting worker" comes before).

    ``gc.freeze()`` moves every object alive now (Django, DRF, the URL map, the settings: some
    120,000 the collector tracks) out of its reach. They live as long as the worker, and a full
    collection would otherwise walk all of them on the request it lands on: about 90 to 95 ms
    of CPU with the bare create behind ``@idempotent``, against 15 to 25 ms frozen
    (``bench/gc_pauses.py``, ``docs/benchmarks.md``'s causes table). A cycle among them is
    never collected; there are only the ones start-up made."""
    gc.freeze()
    worker.log.info(WORKER_READY_MESSAGE, worker.pid)


def worker_exit(server: Any, worker: Any) -> None:
    """Release the worker's order-ID worker-id lease, if it took one.

    gunicorn calls this in the exiting worker (and, for a worker that vanished, in the master,
    which holds no lease: checked by pid). A worker that never placed an order never leased an
    id; one that never loaded the app has not imported the module, so nothing is imported here.
    A worker killed with SIGKILL (e.g. after ``timeout``) does not get here; its lease lapses.
    """
    if worker.pid != os.getpid():
        return
    order_ids = sys.modules.get("ordering.order_ids")
    if order_ids is None:
        return
    try:
        order_ids.release_process_lease()
    except Exception:
        server.log.exception("could not release the order-ID worker lease of pid %s", worker.pid)


# Names the metrics directory a master made, as "<its pid>:<path>", in the environment: a
# reload (SIGHUP) runs this file afresh in the master, so a module global forgot the directory
# and the master stopping after a reload left it behind; the environment outlives the reload.
# A master re-executed by an upgrade (SIGUSR2) inherits it with another pid: that directory is
# its parent's, which removes it as it stops.
METRICS_DIR_MADE_BY = "ORDERING_METRICS_DIR_MADE_BY"


def on_starting(server: Any) -> None:
    """prometheus-client's multiprocess mode: every worker writes its metrics to files in this
    directory and /metrics merges them. Set in the master before any worker starts (workers
    import prometheus_client after the fork); a fresh directory per start, so a restart does
    not count old workers twice."""
    named = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not named or _made_by_a_master(named):
        made = tempfile.mkdtemp(prefix="ordering-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = made
        os.environ[METRICS_DIR_MADE_BY] = f"{os.getpid()}:{made}"


def on_exit(server: Any) -> None:
    """The master, stopping, removes the metrics directory it made: a fresh one per start was
    never removed, so every restart (a deploy, a crash loop) left another in the temporary
    directory with its workers' files. One the environment named is left alone."""
    named = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if named and _made_by_a_master(named, pid=os.getpid()):
        shutil.rmtree(named, ignore_errors=True)


def _made_by_a_master(path: str, *, pid: int | None = None) -> bool:
    """Whether a gunicorn master made ``path`` in on_starting (``pid``: that very master)."""
    maker, _, made = os.environ.get(METRICS_DIR_MADE_BY, "").partition(":")
    return made == path and (pid is None or maker == str(pid))


def child_exit(server: Any, worker: Any) -> None:
    """Drop a dead worker's live gauges from the merged metrics."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)

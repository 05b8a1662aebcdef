"""The Celery app: ``celery -A config worker`` (and ``celery -A config beat`` once per site).

Delivery is at least once, on purpose: every task is safe to run twice (the outbox consumer
records processed events, saga steps carry compensation ids), so the broker settings below
choose "never lose a message" over "never repeat one":

- ``task_acks_late``: a message is acknowledged after its task returned, not when it was
  received, so a worker that dies mid-task leaves it unacknowledged;
- ``task_reject_on_worker_lost``: a prefork child killed mid-task (SIGKILL, OOM) sends the
  message back to the queue at once instead of acknowledging it as failed;
- ``worker_prefetch_multiplier = 1``: a worker holds one message per process, so a crash puts
  back at most that many and a busy worker does not sit on messages others could run;
- ``visibility_timeout`` (``settings.CELERY_VISIBILITY_TIMEOUT``): an unacknowledged message goes
  back to the queue after this long — after a whole worker died, for instance. It must exceed the
  longest task *and* the longest retry countdown (workers hold ETA messages unacknowledged),
  or a message still being worked on is delivered a second time;
- ``unacked_restore_interval`` / ``unacked_restore_throttle``: kombu 5.7 runs the sweep that
  restores such messages only every interval x throttle seconds (10 x 10 by default, so 100 s
  on top of the visibility timeout); throttle 1 makes the interval the whole delay.

Env-driven values (broker URL, queue, visibility timeout, eager mode for the demo, the beat
schedule) live in ``config/settings.py`` under ``# --- celery / payments``.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from celery import Celery
from celery.signals import beat_init, worker_init, worker_ready
from django.core.exceptions import ImproperlyConfigured

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def refuse_in_one_line() -> None:
    """Under the ``celery`` command (``celery -A config worker``, ``beat``), a setting that
    stops the server ends the process in one line naming it, exit status 1, as ``manage.py``
    (``config/command_line.py``) and gunicorn (``config/wsgi.py``) do: the settings are read
    first here, where Celery read them while parsing its options and wrote some ninety lines of
    click's and Django's machinery with the reason at their end. A process that only imports
    the app (the web's, a test's) reads its settings as it always did."""
    if "celery.bin.celery" not in sys.modules:
        return
    from django.conf import settings

    try:
        settings.INSTALLED_APPS  # noqa: B018 - reading a setting loads them all
    except ImproperlyConfigured as refused:
        sys.stderr.write(f"ImproperlyConfigured: {refused}\n")
        sys.exit(1)


refuse_in_one_line()

logger = logging.getLogger(__name__)

BROKER_SOCKET_TIMEOUT_SECONDS = 2.0

app = Celery("config")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    # A worker that loses its broker keeps reconnecting for as long as the outage lasts
    # (every 30 s at most). Celery's default gives up after 100 attempts, about 46 minutes,
    # and stops the worker: after a long Redis outage the outbox and the sagas would then wait
    # for someone to start it again.
    broker_connection_max_retries=None,
    # A publish that cannot reach the broker gives up quickly: the outbox row stays unpublished
    # and the sweeper sends it later, so a request never hangs on a broker outage. This bounds
    # connecting; a broker that accepts and then never answers (a hung or paused Redis) is
    # bounded by the socket timeout below.
    broker_connection_timeout=2,
    task_publish_retry_policy={
        "max_retries": 2,
        "interval_start": 0,
        "interval_step": 0.2,
        "interval_max": 0.5,
    },
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    # An error reply from the broker reconnects too, as a lost connection does, instead of
    # stopping the worker: a failover that demotes the old primary ends the worker's BRPOP with
    # "UNBLOCKED ... master -> replica" (tests/faults/test_broker_restart.py).
    broker_channel_error_retry=True,
)


@app.on_after_configure.connect
def _transport_options(sender: Celery, **kwargs: Any) -> None:
    """Broker options from settings; producers and workers must agree on them."""
    from django.conf import settings

    sender.conf.broker_transport_options = {
        # Each read and write on the broker's socket. Without it a publish to a Redis that
        # holds the connection open and never answers waited for ever: a request's
        # after-commit publish held its gunicorn worker until the worker was killed, and the
        # client got a 500 for work that had committed. Above the consumers' 1 s BRPOP.
        "socket_timeout": BROKER_SOCKET_TIMEOUT_SECONDS,
        "socket_connect_timeout": BROKER_SOCKET_TIMEOUT_SECONDS,
        "visibility_timeout": settings.CELERY_VISIBILITY_TIMEOUT,
        "unacked_restore_interval": settings.CELERY_RESTORE_INTERVAL,
        "unacked_restore_throttle": 1,
    }


app.autodiscover_tasks()


@worker_ready.connect
def _reclaim_on_start(sender: Any = None, **kwargs: Any) -> None:
    """A worker starting up (often: replacing one that died) reclaims dead processes' leases."""
    try:
        app.send_task("ordering.reclaim_stale_leases", queue=app.conf.task_default_queue)
    except Exception:  # a broker hiccup must not stop the worker; beat runs it again soon
        logger.exception("could not schedule stale-lease recovery at start-up")


@beat_init.connect
def _purge_on_start(sender: Any = None, **kwargs: Any) -> None:
    """Beat sends the retention purge as it starts, then on its schedule. An interval task is
    first sent one interval after beat starts: with the purge's hour and a schedule file that
    does not outlive the process (``make run`` makes a fresh one each run, and so does a
    container), a beat restarted within the hour never purged anything."""
    try:
        app.send_task("tenants.purge_expired_data", queue=app.conf.task_default_queue)
    except Exception:  # a broker hiccup must not stop beat; the schedule sends it again
        logger.exception("could not send the retention purge at start-up")


@worker_init.connect
def _survive_losing_the_broker(**kwargs: Any) -> None:
    """In a worker, before it connects: a lost broker is reconnected to, never the end of the
    worker (config/celery_consumer.py)."""
    import config.celery_consumer  # noqa: F401 - applies the repair on import


@worker_init.connect
@beat_init.connect
def _refuse_to_start_on_check_errors(**kwargs: Any) -> None:
    """A worker or beat that Django's system checks refuse does not start, as gunicorn does not
    (``config/startup_checks.py``). Celery runs the checks itself and ignores what they find,
    and it logs and carries on after any exception a signal handler raises: ``SystemExit``
    is the one it lets through."""
    from django.core.exceptions import ImproperlyConfigured

    from config.startup_checks import refuse_to_start_on_check_errors

    try:
        refuse_to_start_on_check_errors()
    except ImproperlyConfigured as refused:
        raise SystemExit(f"celery not started: {refused}") from None

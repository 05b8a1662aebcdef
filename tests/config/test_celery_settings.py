"""Settings of the Celery app that decide what a broker outage does to a worker."""

from __future__ import annotations

from config.celery import app


def test_a_worker_reconnects_to_its_broker_for_as_long_as_the_outage_lasts() -> None:
    """Celery's default (100 attempts) stops the worker after about 46 minutes without Redis."""
    assert app.conf.broker_connection_retry_on_startup is True
    assert app.conf.broker_connection_retry is True
    assert app.conf.broker_connection_max_retries is None

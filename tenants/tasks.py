"""Celery entry points of the tenants app (``celery -A config worker`` discovers them)."""

from __future__ import annotations

import logging

from celery import shared_task

from tenants.retention import purge_expired_data as purge

logger = logging.getLogger(__name__)


@shared_task(name="tenants.purge_expired_data", ignore_result=True)
def purge_expired_data() -> dict[str, int]:
    """Scheduled by Celery beat (``CELERY_BEAT_SCHEDULE["purge-expired-data"]``); each batch
    deletes only rows still expired when it runs, and tallies what it deleted."""
    purged = purge()
    logger.info("retention purge", extra={"purged": purged})
    return purged

"""System checks of the ordering app's own settings (run by ``manage.py check``, and by gunicorn,
the Celery worker and beat as they start: ``config/startup_checks.py``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register
from django.utils.module_loading import import_string


@register(Tags.compatibility)
def check_delivery_adapter(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``DELIVERY_ADAPTER`` names a class that can be imported. It is read only when a cancel's
    saga reaches its delivery step: a misspelt path failed that step in every cancel, which
    stopped there, dead-lettered, before the refund."""
    path = settings.DELIVERY_ADAPTER
    try:
        import_string(path)
    except ImportError as exc:
        return [
            Error(
                f"DELIVERY_ADAPTER names no class that can be imported ({path!r}: {exc})",
                hint="ordering.delivery.NoDeliveryPartner while no courier service is integrated",
                id="ordering.E001",
            )
        ]
    return []

"""A process that Django's system checks refuse does not serve: the web server (``config/wsgi.py``,
or ``config/asgi.py``), the Celery worker and beat (``config/celery.py``) run the checks when they
start and stop on an error.

``manage.py migrate`` and ``check`` run them, but gunicorn and Celery do not (Celery runs them
and ignores the result), so a setting the checks name as wrong was served anyway: a negative
latency threshold in ``IDEMPOTENCY_BREAKER``, a previous hash key under the current one's id
in ``IDEMPOTENCY_HASH_KEYS_PREVIOUS``, a ``DELIVERY_ADAPTER`` that cannot be imported. Only
errors stop a start (warnings, such as the deployment checks', are the operator's to weigh),
and silenced ones are left out.
"""

from __future__ import annotations

from django.core import checks
from django.core.exceptions import ImproperlyConfigured


def refuse_to_start_on_check_errors() -> None:
    """Raise :class:`ImproperlyConfigured` naming every serious, unsilenced check message."""
    serious = [
        message
        for message in checks.run_checks()
        if message.is_serious() and not message.is_silenced()
    ]
    if serious:
        raise ImproperlyConfigured(
            "System check errors, fix these settings before starting: "
            + "; ".join(str(message) for message in serious)
        )

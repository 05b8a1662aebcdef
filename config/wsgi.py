"""WSGI entry point (gunicorn config.wsgi:application)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

from config.startup_checks import refuse_to_start_on_check_errors  # noqa: E402 - after setup

refuse_to_start_on_check_errors()

"""WSGI entry point (gunicorn config.wsgi:application).

A setting that stops the server (``ImproperlyConfigured``, from the settings or the system
checks) ends a gunicorn worker's boot in one line naming it, and gunicorn halts ("App failed
to load") instead of writing "Exception in worker process" and a traceback of some forty
lines through the import machinery, with the reason at its end: gunicorn writes an
``AppImportError`` as its message alone. Other servers get the ``ImproperlyConfigured``."""

import os
import sys

from django.core.exceptions import ImproperlyConfigured
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
try:
    application = get_wsgi_application()

    from config.startup_checks import refuse_to_start_on_check_errors

    refuse_to_start_on_check_errors()
except ImproperlyConfigured as refused:
    if "gunicorn" not in sys.modules:
        raise
    from gunicorn.errors import AppImportError

    raise AppImportError(f"ImproperlyConfigured: {refused}") from None

"""ASGI entry point, for servers such as uvicorn.

Like the WSGI one (``config/wsgi.py``), it runs Django's system checks as it loads and stops
on an error (``config/startup_checks.py``): a server that loaded it served a setting the
checks call wrong.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_asgi_application()

from config.startup_checks import refuse_to_start_on_check_errors  # noqa: E402 - after setup

refuse_to_start_on_check_errors()

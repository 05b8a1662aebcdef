"""Workers keep their PostgreSQL connection and check it before reuse (ADR 0006)."""

from __future__ import annotations

import os
import subprocess
import sys

from django.conf import settings


def test_connections_persist_and_are_health_checked_by_default() -> None:
    assert "DB_CONN_MAX_AGE" not in os.environ
    assert settings.DATABASES["default"]["CONN_MAX_AGE"] == 300
    assert settings.DATABASES["default"]["CONN_HEALTH_CHECKS"] is True


def test_db_conn_max_age_0_opens_a_connection_per_request() -> None:
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "d = settings.DATABASES['default']; print(d['CONN_MAX_AGE'], d['CONN_HEALTH_CHECKS'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "DB_CONN_MAX_AGE": "0", "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split()[-2:] == ["0", "True"]

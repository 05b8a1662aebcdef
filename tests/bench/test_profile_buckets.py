"""The py-spy summary of ``bench/http_load.py`` puts each sampled stack in the right buckets:
py-spy names a method ``Class.method``, so a bucket for Django's ``commit`` must not also take
``set_autocommit``, where Django runs the connection's health check."""

from __future__ import annotations

from pathlib import Path

from bench.http_load import summarize_profile

REQUEST = "handle_request (gunicorn/workers/sync.py:1)"
DB = "django/db/backends/base/base.py"


def test_commit_and_the_health_check_are_told_apart(tmp_path: Path) -> None:
    raw = tmp_path / "worker.txt"
    raw.write_text(
        f"{REQUEST};BaseDatabaseWrapper.set_autocommit ({DB}:470);"
        f"BaseDatabaseWrapper.close_if_health_check_failed ({DB}:587);"
        "Connection.wait (psycopg/connection.py:1) 3\n"
        f"{REQUEST};BaseDatabaseWrapper.commit ({DB}:330);"
        f"BaseDatabaseWrapper._commit ({DB}:300) 1\n"
        "idle_thread (threading.py:1) 5\n"
    )
    shares = summarize_profile([raw])["inclusive_pct"]
    assert shares["transaction commit"] == 25.0
    assert shares["connection health check"] == 75.0

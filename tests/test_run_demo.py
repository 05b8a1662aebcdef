"""What ``make run`` tells a new user (``scripts/run_demo.sh``), with the Python it would start
replaced by a stub that exits at once: the script's own decisions and printout, no server."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REDIS_VARIABLES = ("REDIS_URL", "REDIS_SHARDS", "REDIS_CLUSTER_URL", "CELERY_BROKER_URL")


def run_demo(tmp_path: Path, **env: str) -> str:
    # a stub of its own per run: the run before may still be executing its stub (the purge
    # loop's last call, as the script stops it), and writing over a file being executed fails
    # (OSError: Text file busy)
    stub = Path(tempfile.mkdtemp(dir=tmp_path)) / "python"
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    base = {k: v for k, v in os.environ.items() if k not in REDIS_VARIABLES}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "run_demo.sh")],
        env={**base, "PY": str(stub), **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout


def test_without_redis_the_printout_says_tokens_need_it_and_what_to_send_instead(tmp_path):
    out = run_demo(tmp_path)
    assert "503 IDEMPOTENCY_TOKENS_UNAVAILABLE" in out
    assert "Send your own" in out and "UUID v4" in out and "REDIS_URL=" in out
    assert "confirms each payment 2 s after it starts" in out


@pytest.mark.parametrize("variable", ["REDIS_URL", "REDIS_SHARDS", "REDIS_CLUSTER_URL"])
def test_with_redis_there_is_no_token_warning(tmp_path, variable):
    out = run_demo(tmp_path, **{variable: "redis://127.0.0.1:6379/15"})
    assert "IDEMPOTENCY_TOKENS_UNAVAILABLE" not in out


def test_the_retention_purge_is_scheduled_with_or_without_a_broker(tmp_path):
    without = run_demo(tmp_path, RETENTION_PURGE_SECONDS="600")
    assert "expired data is purged at start and every 600 s" in without
    with_broker = run_demo(tmp_path, REDIS_URL="redis://127.0.0.1:6379/15")
    assert "beat purges expired data every 3600 s" in with_broker

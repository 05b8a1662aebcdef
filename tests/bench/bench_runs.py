"""A benchmark run end to end for its smoke test: a private Redis node (nothing shared is
flushed) and a uniquely named database, which the benchmark drops at the end."""

from __future__ import annotations

import subprocess
import sys
import uuid

from bench.http_load import PROJECT_ROOT
from tests.support.redis_nodes import RedisNode


def run_bench(module: str, *args: str, db_prefix: str) -> subprocess.CompletedProcess[str]:
    """``python -m <module> <args>`` on its own Redis node and database; its output."""
    node = RedisNode().start()
    try:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                module,
                *args,
                "--db-name",
                f"{db_prefix}_{uuid.uuid4().hex[:8]}",
                "--redis-url",
                f"redis://127.0.0.1:{node.port}/0",
            ],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        node.remove()

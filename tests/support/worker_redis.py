"""Each pytest-xdist worker gets Redis databases of its own (``make test`` runs two workers).

pytest-django gives every worker a test database of its own (``test_<name>_gw0``, ...), but
the suite's Redis is one URL: the workers' tenants have the same primary keys (each test
database starts them at 1), so one worker's idempotency entries, tokens and rate counters
would be another's, and each test's clean-up would delete the other worker's keys mid-test.

Loaded with ``-p`` (``pyproject.toml``), this module runs before pytest-django reads the
settings: in worker ``gwN`` it moves ``REDIS_URL`` from database D to D + 2N, which keeps
D + 2N + 1 free for the Celery broker the settings put next to it (``config/settings.py``).
The URL it started from is kept in ``SUITE_REDIS_URL``, so a pytest the suite runs in a child
(which inherits both) moves it once only. Outside xdist nothing changes.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

DATABASES_PER_WORKER = 2  # the engine's and the broker's


def worker_redis_url(url: str, worker: str) -> str:
    """``url`` moved to worker ``gwN``'s database; the last Redis database is 15."""
    parts = urlsplit(url)
    database = int(parts.path.strip("/") or 0) + DATABASES_PER_WORKER * int(worker[2:])
    if database + 1 > 15:
        raise RuntimeError(f"too many test workers for {url}: worker {worker} needs db {database}")
    return parts._replace(path=f"/{database}").geturl()


_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker.startswith("gw") and os.environ.get("REDIS_URL"):
    _base = os.environ.setdefault("SUITE_REDIS_URL", os.environ["REDIS_URL"])
    os.environ["REDIS_URL"] = worker_redis_url(_base, _worker)

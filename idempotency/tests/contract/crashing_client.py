"""A process that sends one write and is killed (SIGKILL) at a chosen point of it.

``python -m idempotency.tests.contract.crashing_client WHERE TENANT KEY LEASE_MS`` with
``WHERE`` one of:

- ``after-commit``: the business write and the idempotency record are committed, then the
  process dies before Redis hears the result (the claim stays "in progress", its owner gone);
- ``before-commit``: the process dies inside the transaction (PostgreSQL rolls it back when
  the connection drops) while its claim holds the key for ``LEASE_MS``.

It exits 1 if it was not killed, which the test reports.
"""

from __future__ import annotations

import os
import signal
import sys

import django


def _die(*args: object, **kwargs: object) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(where: str, tenant: str, key: str, lease_ms: str) -> int:
    django.setup()
    from django.conf import settings
    from django.test import Client

    from idempotency.stores.redis_store import RedisIdempotencyStore
    from idempotency.tests.conftest import post_note
    from idempotency.tests.testapp.models import Note

    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "LEASE_MS": int(lease_ms)}
    if where == "after-commit":
        RedisIdempotencyStore.finish = _die  # type: ignore[method-assign]
    elif where == "before-commit":
        Note.save = _die  # type: ignore[method-assign]
    else:
        raise SystemExit(f"unknown crash point {where!r}")
    response = post_note(Client(), tenant, key=key, text="crash")
    print(f"not killed: {response.status_code}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))

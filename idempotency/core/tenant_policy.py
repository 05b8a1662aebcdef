"""What a tenant decides about its own data: the paths it redacts and how long records live.

The host answers through two hooks (``REDACT_FOR_TENANT``, ``RECORD_TTL_FOR_TENANT``); the
engine asks each at most once per ``TENANT_POLICY_CACHE_SECONDS`` per process and tenant, so a
write pays no extra query in the common case, and a tenant's change reaches every process
within that time. Only writes ask: a replay from the local cache stays free of queries.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from idempotency.core.conf import MAX_TTL_SECONDS, engine_hook, engine_setting
from idempotency.core.redaction import check_paths

_cache: dict[tuple[str, str], tuple[float, Any]] = {}
_lock = threading.Lock()


def tenant_redaction(tenant: str) -> tuple[str, ...]:
    """The JSON paths ``tenant`` redacts on every endpoint (checked: a malformed path from
    the hook is a ``ValueError``, never silently ignored)."""
    return _lookup("REDACT_FOR_TENANT", tenant, lambda paths: check_paths(paths or ()), ())


def tenant_record_ttl(tenant: str) -> int | None:
    """Seconds ``tenant``'s finished results replay, or None for the endpoint's / default."""
    return _lookup("RECORD_TTL_FOR_TENANT", tenant, _record_ttl, None)


def _record_ttl(ttl: Any) -> int | None:
    """The hook's answer checked: None (or 0) for the endpoint's or default TTL, else seconds
    over 0, up to ``MAX_TTL_SECONDS``. Anything else is a ``ValueError`` before the view runs:
    a negative number wrote records already expired, so nothing replayed and every retry ran
    the view again; a huge one overflowed the record's expiry after the view had run."""
    if not ttl:
        return None
    seconds = int(ttl)
    if not 0 < seconds <= MAX_TTL_SECONDS:
        raise ValueError(
            f"RECORD_TTL_FOR_TENANT returned {ttl!r}: a number of seconds over 0 up to "
            f"{MAX_TTL_SECONDS}, or None"
        )
    return seconds


def reset_tenant_policy_cache() -> None:
    """Forget looked-up tenant policies (tests, or right after changing one)."""
    with _lock:
        _cache.clear()


def _lookup(setting: str, tenant: str, convert: Any, default: Any) -> Any:
    hook = engine_hook(setting)
    if hook is None:
        return default
    now = time.monotonic()
    cached = _cache.get((setting, tenant))
    if cached is not None and cached[0] > now:
        return cached[1]
    value = convert(hook(tenant))
    with _lock:
        _cache[(setting, tenant)] = (now + engine_setting("TENANT_POLICY_CACHE_SECONDS"), value)
    return value

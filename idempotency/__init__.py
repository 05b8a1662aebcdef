"""An idempotency engine for Django and DRF: a repeated write runs once and replays its answer.

The public surface (everything else is internal and may move)::

    from idempotency import idempotent          # DRF handlers
    from idempotency import idempotent_form     # plain Django views (forms)
    from idempotency import business_atomic     # a service's transaction, savepoint-free inside
    from idempotency import Policy, IdempotencyErrorCode
    from idempotency import __version__         # the installed version, e.g. "0.1.0"

Names are imported on first use, so importing the package needs no configured Django.
Layout: ``core/`` (keys, fingerprints, outcomes, the request flow), ``stores/`` (Redis,
database, local cache, circuit breaker), ``scripts/`` (Lua and its versions), ``web/`` (DRF
and Django glue, token API), ``admin/``.
"""

from __future__ import annotations

from importlib import import_module, metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # what a type checker reads (the package ships ``py.typed``); at run time the names are
    # imported on first use, below
    from idempotency.core.conf import Policy as Policy
    from idempotency.core.error_codes import IdempotencyErrorCode as IdempotencyErrorCode
    from idempotency.core.transactions import business_atomic as business_atomic
    from idempotency.web.drf import idempotent as idempotent
    from idempotency.web.forms import idempotent_form as idempotent_form

    __version__: str

_EXPORTS = {
    "idempotent": "idempotency.web.drf",
    "idempotent_form": "idempotency.web.forms",
    "business_atomic": "idempotency.core.transactions",
    "Policy": "idempotency.core.conf",
    "IdempotencyErrorCode": "idempotency.core.error_codes",
}

__all__ = sorted(_EXPORTS)


DISTRIBUTION = "django-idempotency-engine"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        # the installed distribution's (pyproject.toml says it once), read when asked for
        return metadata.version(DISTRIBUTION)
    if name not in _EXPORTS:
        raise AttributeError(f"module 'idempotency' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)

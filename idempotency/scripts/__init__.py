"""The Lua scripts the engine runs on Redis (``lua/``) and their versions: which one runs for
a tenant (:mod:`~idempotency.scripts.registry`) and how staff change that
(:mod:`~idempotency.scripts.versions`)."""

"""Where claims and results live: Redis (Lua), the database record, the in-process cache,
and the per-node circuit breaker that decides when Redis is skipped."""

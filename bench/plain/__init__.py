"""Benchmark-only endpoints: a bare DRF create, the same behind ``@idempotent`` and behind a
peer library (drf-idempotency with its Redis backend).

Mounted under ``/api/bench/`` only when ``BENCH_ENDPOINTS=1`` (``config/settings.py``); never
in production. ``bench/http_load.py`` measures every other case against ``plain``.
"""

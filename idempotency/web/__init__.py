"""HTTP glue: the DRF decorator, the Django form decorator, the token API and its URLs, the
rate-limit throttle and OpenAPI helpers."""

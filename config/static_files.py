"""Headers for the static files WhiteNoise serves (``WHITENOISE_ADD_HEADERS_FUNCTION``).

WhiteNoise answers a static file before the CSP and framing middlewares run, so the files went
out without the site's Content-Security-Policy and X-Frame-Options. One of them is an HTML page
(Swagger UI's OAuth redirect, ``drf_spectacular_sidecar``), which any site could then frame,
and an SVG opened by itself is a document too. Every file now carries the policy every page
carries; on a stylesheet, a script or an image a browser ignores it.
"""

from __future__ import annotations

from wsgiref.headers import Headers

from csp.utils import build_policy
from django.conf import settings


def add_page_headers(headers: Headers, path: str, url: str) -> None:
    """Add the site's Content-Security-Policy and ``X-Frame-Options`` to a static file's
    headers. WhiteNoise calls this once per file (per request with ``WHITENOISE_AUTOREFRESH``),
    so the policy is built from the settings as they are then."""
    policy = build_policy()
    if policy:
        headers["Content-Security-Policy"] = policy
    headers["X-Frame-Options"] = settings.X_FRAME_OPTIONS

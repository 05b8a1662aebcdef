"""Static files are served by the app itself (WhiteNoise, before the CSP and framing
middlewares): each carries the site's Content-Security-Policy and X-Frame-Options too, as the
README says of every page. Among them is an HTML page, Swagger UI's OAuth redirect, which
anyone could frame."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.config.test_csp_middleware import directives

OAUTH_REDIRECT = "/static/drf_spectacular_sidecar/swagger-ui-dist/oauth2-redirect.html"


@pytest.mark.parametrize(
    "path",
    [OAUTH_REDIRECT, "/static/dashboard/dashboard.css", "/static/dashboard/icon.svg"],
    ids=["html-page", "stylesheet", "svg-image"],
)
def test_a_static_file_carries_the_site_s_policy_and_cannot_be_framed(path: str) -> None:
    answer = Client().get(path)

    assert answer.status_code == 200
    policy = directives(answer["Content-Security-Policy"])
    assert policy["frame-ancestors"] == "'none'"
    assert policy["script-src"] == "'self'"
    assert answer["X-Frame-Options"] == "DENY"

"""The CSP middleware builds the settings' policy once and still honours what django-csp does
per request (config/csp.py): the same header as django-csp, a nonce, a per-view policy, an
exemption, a policy changed by the settings."""

from __future__ import annotations

import pytest
from csp.constants import NONCE, NONE, SELF
from csp.decorators import csp_exempt, csp_update
from csp.middleware import CSPMiddleware
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory

from config.csp import SettingsPolicyCSPMiddleware

HEADER = "Content-Security-Policy"


def directives(header: str) -> dict[str, str]:
    """A policy as {directive: sources}: django-csp's directive order is a set's."""
    return dict(part.strip().split(" ", 1) for part in header.split(";") if part.strip())


def served(middleware_class: type, view, path: str = "/api/v1/orders/") -> HttpResponse:
    request = RequestFactory().post(path)
    middleware = middleware_class(view)
    return middleware(request)


def plain_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse("{}", content_type="application/json")


def test_the_header_is_django_csps_own():
    ours = served(SettingsPolicyCSPMiddleware, plain_view)[HEADER]
    theirs = served(CSPMiddleware, plain_view)[HEADER]

    assert directives(ours) == directives(theirs)
    assert directives(ours)["frame-ancestors"] == "'none'"


def test_a_changed_setting_changes_the_header(settings):
    served(SettingsPolicyCSPMiddleware, plain_view)  # built and kept for the old settings
    settings.CONTENT_SECURITY_POLICY = {"DIRECTIVES": {"default-src": [NONE]}}

    assert served(SettingsPolicyCSPMiddleware, plain_view)[HEADER] == "default-src 'none'"


def test_report_only_policy_is_sent_too(settings):
    settings.CONTENT_SECURITY_POLICY_REPORT_ONLY = {"DIRECTIVES": {"img-src": [SELF]}}

    response = served(SettingsPolicyCSPMiddleware, plain_view)

    theirs = served(CSPMiddleware, plain_view)
    report_only = "Content-Security-Policy-Report-Only"
    assert directives(response[report_only]) == directives(theirs[report_only])
    assert directives(response[report_only])["img-src"] == "'self'"
    assert HEADER in response


def test_a_nonce_drawn_by_the_view_is_in_the_header(settings):
    settings.CONTENT_SECURITY_POLICY = {"DIRECTIVES": {"script-src": [SELF, NONCE]}}

    def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse(f'<script nonce="{request.csp_nonce}"></script>')

    response = served(SettingsPolicyCSPMiddleware, view, "/dashboard/")
    nonce = response.content.decode().split('"')[1]

    assert f"'nonce-{nonce}'" in directives(response[HEADER])["script-src"]


def test_a_per_view_policy_and_an_exemption_are_honoured():
    with_cdn = csp_update({"img-src": "cdn.example"})(plain_view)
    updated = served(SettingsPolicyCSPMiddleware, with_cdn)
    exempt = served(SettingsPolicyCSPMiddleware, csp_exempt()(plain_view))

    assert "cdn.example" in directives(updated[HEADER])["img-src"]
    assert HEADER not in exempt


def test_a_nonce_asked_for_after_the_header_is_refused():
    request = RequestFactory().get("/api/v1/orders/")
    SettingsPolicyCSPMiddleware(plain_view)(request)

    with pytest.raises(Exception, match="after the CSP header has been written"):
        str(request.csp_nonce)


def test_an_excluded_prefix_gets_no_header(settings):
    settings.CONTENT_SECURITY_POLICY = {
        "EXCLUDE_URL_PREFIXES": ["/api/"],
        "DIRECTIVES": {"default-src": [SELF]},
    }

    assert HEADER not in served(SettingsPolicyCSPMiddleware, plain_view)
    assert HEADER in served(SettingsPolicyCSPMiddleware, plain_view, "/dashboard/")

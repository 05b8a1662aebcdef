"""django-csp's middleware, with the settings' policy built once per process.

django-csp 4 builds both headers (enforced and report-only) from the settings on every
response: ``dataclasses.asdict`` of the policy parts and ``build_policy``, about 60 µs of CPU
per request here, a twelfth of a replayed order. A response whose request drew no nonce and
whose view set no per-response policy gets the same two strings every time: those are built
once and rebuilt when a test changes the settings. Every other response goes through
django-csp unchanged.
"""

from __future__ import annotations

from functools import cache

from csp.constants import HEADER, HEADER_REPORT_ONLY
from csp.middleware import CheckableLazyObject, CSPMiddleware
from csp.utils import build_policy
from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponseBase

# what a view sets to change its response's policy (csp.decorators)
_PER_RESPONSE = tuple(
    f"_csp_{kind}{ro}" for kind in ("config", "update", "replace") for ro in ("", "_ro")
)
_DEBUG_EXEMPT = (404, 500)  # django-csp leaves Django's debug pages alone under DEBUG


@cache
def _settings_headers() -> tuple[tuple[str, str, str, tuple[str, ...]], ...]:
    """(header, value, exemption attribute, excluded path prefixes) of each non-empty policy."""
    out = []
    for header, setting, exempt, report_only in (
        (HEADER, "CONTENT_SECURITY_POLICY", "_csp_exempt", False),
        (HEADER_REPORT_ONLY, "CONTENT_SECURITY_POLICY_REPORT_ONLY", "_csp_exempt_ro", True),
    ):
        value = build_policy(report_only=report_only)
        policy = getattr(settings, setting, None) or {}
        if value:
            out.append((header, value, exempt, tuple(policy.get("EXCLUDE_URL_PREFIXES") or ())))
    return tuple(out)


@receiver(setting_changed)
def _forget_headers(*, setting: str, **_: object) -> None:
    if setting.startswith("CONTENT_SECURITY_POLICY"):
        _settings_headers.cache_clear()


class SettingsPolicyCSPMiddleware(CSPMiddleware):
    def process_response(
        self, request: HttpRequest, response: HttpResponseBase
    ) -> HttpResponseBase:
        if getattr(request, "_csp_nonce", None) is not None or any(
            hasattr(response, name) for name in _PER_RESPONSE
        ):
            return super().process_response(request, response)
        if settings.DEBUG and response.status_code in _DEBUG_EXEMPT:
            return response
        for header, value, exempt, excluded in _settings_headers():
            if (
                header not in response
                and not getattr(response, exempt, False)
                and not request.path_info.startswith(excluded)
            ):
                response[header] = value
        # as django-csp: a nonce drawn after the header is written would not be in it
        request.csp_nonce = CheckableLazyObject(self._csp_nonce_post_response)  # type: ignore[attr-defined]
        return response

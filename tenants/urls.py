"""URLs of diner sessions, included under the API prefix (``/api/v1/``).

The diner id in a path is taken whole (any characters, ``/`` and line breaks included) and
checked by the view: a malformed one is the caller's bad input, 400 ``VALIDATION_ERROR``, not a
route that does not exist (404 ``NOT_FOUND``, which a backend could read as "nothing to
revoke").
"""

from django.urls import path, register_converter

from tenants import sessions_api


class AnyTextConverter:
    """One or more of any character (``path:`` stops at a line break)."""

    regex = r"[\s\S]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(AnyTextConverter, "diner_id")

urlpatterns = [
    path("diner-sessions/", sessions_api.DinerSessionsView.as_view(), name="diner-sessions"),
    path(
        "diner-sessions/refresh/",
        sessions_api.RefreshSessionView.as_view(),
        name="diner-sessions-refresh",
    ),
    path("diner-sessions/end/", sessions_api.EndSessionView.as_view(), name="diner-sessions-end"),
    path(
        "diners/<diner_id:diner_id>/revoke-sessions/",
        sessions_api.RevokeDinerSessionsView.as_view(),
        name="diner-revoke-sessions",
    ),
]

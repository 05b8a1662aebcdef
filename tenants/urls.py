"""URLs of diner sessions, included under the API prefix (``/api/v1/``)."""

from django.urls import path, register_converter

from tenants import sessions_api


class DinerIdConverter:
    regex = r"[A-Za-z0-9_.:@-]{1,64}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(DinerIdConverter, "diner_id")

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

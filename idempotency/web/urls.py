"""URLs of the engine's own API (pre-issued tokens); the host app includes them under its API
prefix, e.g. ``path("api/v1/", include("idempotency.web.urls"))``."""

from django.urls import path

from idempotency.web import api

urlpatterns = [
    path("idempotency-tokens/", api.IssueTokensView.as_view(), name="idempotency-tokens"),
    path(
        "idempotency-tokens/check/",
        api.CheckTokensView.as_view(),
        name="idempotency-tokens-check",
    ),
]

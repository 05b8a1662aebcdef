"""URL map: the REST API under /api/v1/, its schema and docs, the dashboard, the admin."""

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import include, path
from drf_spectacular.utils import extend_schema, extend_schema_view
from drf_spectacular.views import SpectacularSwaggerSplitView

from config.metrics_view import metrics
from config.schema_view import SchemaView
from idempotency.web import api as tokens_api
from tenants.login_forms import StaffLoginForm
from tenants.permissions import Capability, declare

TOKENS = Capability.USE_IDEMPOTENCY_TOKENS

# The admin's lists need the width more than a second menu beside them (1280 px screens): the
# home page and the breadcrumbs lead everywhere the sidebar would.
admin.site.enable_nav_sidebar = False
admin.site.login_form = StaffLoginForm  # the username's length checked (tenants/login_forms.py)


def favicon(request: HttpRequest) -> HttpResponse:
    """The site's icon, which browsers ask for at /favicon.ico on every page that names none
    (the dashboard's, the admin's): without it each logged a 404 in the console."""
    return HttpResponsePermanentRedirect(static("dashboard/icon.svg"))


urlpatterns = [
    path("favicon.ico", favicon, name="favicon"),
    path("admin/", admin.site.urls),
    path("metrics", metrics, name="metrics"),
    path("api/schema/", SchemaView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file of its own: no inline script,
    # so the page keeps the site's Content-Security-Policy.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/v1/", include("ordering.api.urls")),
    path("api/v1/", include("tenants.urls")),
    # The engine's pre-issued tokens, with who may use them declared here (tokens are bound to
    # the caller's principal: a session's diner, or a merchant key).
    path(
        "api/v1/idempotency-tokens/",
        declare(tokens_api.IssueTokensView, POST=TOKENS).as_view(),
        name="idempotency-tokens",
    ),
    path(
        "api/v1/idempotency-tokens/check/",
        # named for what it does: drf-spectacular's "…_check_create" named a read a creation
        extend_schema_view(post=extend_schema(operation_id="v1_idempotency_tokens_check"))(
            declare(tokens_api.CheckTokensView, POST=TOKENS)
        ).as_view(),
        name="idempotency-tokens-check",
    ),
    path("", include("ordering.dashboard.urls")),
]
if settings.BENCH_ENDPOINTS:  # benchmark-only views (bench/plain/), off in production
    urlpatterns.insert(0, path("api/bench/", include("bench.plain.urls")))

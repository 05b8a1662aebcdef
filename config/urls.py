"""URL map: the REST API under /api/v1/, its schema and docs, the dashboard, the admin."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from config.metrics_view import metrics

# The admin's lists need the width more than a second menu beside them (1280 px screens): the
# home page and the breadcrumbs lead everywhere the sidebar would.
admin.site.enable_nav_sidebar = False

urlpatterns = [
    path("admin/", admin.site.urls),
    path("metrics", metrics, name="metrics"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/v1/", include("ordering.api.urls")),
    path("api/v1/", include("idempotency.web.urls")),
    path("", include("ordering.dashboard.urls")),
]

"""The project's URLs plus two views that crash, to see the 500 answers (tests only)."""

from django.http import HttpRequest, HttpResponse
from django.urls import path

from config.urls import urlpatterns as project_urlpatterns

__all__ = ["urlpatterns"]


def boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug nobody caught")


urlpatterns = [
    path("api/v1/boom/", boom),
    path("boom/", boom),
    *project_urlpatterns,
]

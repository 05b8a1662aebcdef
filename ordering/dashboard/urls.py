from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.generic import RedirectView

from ordering.dashboard import views

urlpatterns = [
    path("", RedirectView.as_view(url="/dashboard/", permanent=False)),
    path("dashboard/login/", auth_views.LoginView.as_view(), name="login"),
    path("dashboard/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("dashboard/", views.board, name="board"),
    path("dashboard/switch-tenant/", views.switch_tenant_view, name="switch-tenant"),
]

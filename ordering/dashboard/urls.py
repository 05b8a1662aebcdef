"""Dashboard URLs. Names are prefixed ``dash-`` (the API already uses ``order-detail``)."""

from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.generic import RedirectView

from ordering.dashboard import (
    api_keys,
    coupons,
    dashboard_logout,
    idempotency_page,
    members,
    menu,
    orders,
    password,
    privacy,
    tenant,
)
from tenants.login_forms import LoginForm

urlpatterns = [
    path("", RedirectView.as_view(url="/dashboard/", permanent=False)),
    path(
        "dashboard/login/",
        auth_views.LoginView.as_view(authentication_form=LoginForm),
        name="login",
    ),
    # back to the dashboard's sign-in page, with a word (without a next page Django shows the
    # admin's "Logged out" page, whose link leads to the admin)
    path("dashboard/logout/", dashboard_logout.LogoutView.as_view(), name="logout"),
    path("dashboard/password/", password.OwnPasswordView.as_view(), name="dash-password"),
    path("dashboard/", orders.board, name="board"),
    path("dashboard/board/fragment/", orders.board_fragment, name="dash-board-fragment"),
    path("dashboard/orders/<int:order_id>/", orders.order_detail, name="dash-order"),
    path(
        "dashboard/orders/<int:order_id>/transition/",
        orders.order_transition,
        name="dash-order-transition",
    ),
    path("dashboard/menu/", menu.menu, name="dash-menu"),
    path("dashboard/menu/<int:dish_id>/", menu.dish_edit, name="dash-dish"),
    path("dashboard/coupons/", coupons.coupons, name="dash-coupons"),
    path(
        "dashboard/coupons/<int:coupon_id>/deactivate/",
        coupons.coupon_deactivate,
        name="dash-coupon-deactivate",
    ),
    path("dashboard/api-keys/", api_keys.api_keys, name="dash-api-keys"),
    path(
        "dashboard/api-keys/<int:client_id>/revoke/",
        api_keys.api_key_revoke,
        name="dash-api-key-revoke",
    ),
    path("dashboard/members/", members.members, name="dash-members"),
    path(
        "dashboard/members/<int:membership_id>/role/",
        members.member_role,
        name="dash-member-role",
    ),
    path(
        "dashboard/members/<int:membership_id>/remove/",
        members.member_remove,
        name="dash-member-remove",
    ),
    path("dashboard/privacy/", privacy.privacy, name="dash-privacy"),
    path("dashboard/privacy/export/", privacy.privacy_export, name="dash-privacy-export"),
    path("dashboard/idempotency/", idempotency_page.idempotency, name="dash-idempotency"),
    path("dashboard/switch-tenant/", tenant.switch_tenant_view, name="switch-tenant"),
]

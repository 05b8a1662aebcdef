from django.urls import path

from ordering.api import views
from ordering.api.payments import PaymentCallbackView

urlpatterns = [
    path("menu/", views.MenuView.as_view(), name="menu"),
    path("orders/", views.OrderListCreateView.as_view(), name="orders"),
    path("orders/<int:order_id>/", views.OrderDetailView.as_view(), name="order-detail"),
    path("orders/<int:order_id>/pay/", views.OrderPayView.as_view(), name="order-pay"),
    path("orders/<int:order_id>/cancel/", views.OrderCancelView.as_view(), name="order-cancel"),
    path(
        "orders/<int:order_id>/transition/",
        views.OrderTransitionView.as_view(),
        name="order-transition",
    ),
    path("payments/callback/", PaymentCallbackView.as_view(), name="payment-callback"),
]

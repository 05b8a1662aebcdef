from django.urls import path

from bench.plain import views

urlpatterns = [
    path("plain/", views.PlainCreateView.as_view(), name="bench-plain"),
    path("plain-engine/", views.PlainEngineView.as_view(), name="bench-plain-engine"),
    path("plain-peer/", views.plain_peer, name="bench-plain-peer"),
    path("fixed/", views.FixedAnswerView.as_view(), name="bench-fixed"),
]

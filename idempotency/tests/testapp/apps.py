from django.apps import AppConfig


class TestAppConfig(AppConfig):
    name = "idempotency.tests.testapp"
    label = "idempotency_testapp"
    default_auto_field = "django.db.models.BigAutoField"

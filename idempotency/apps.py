from django.apps import AppConfig


class IdempotencyConfig(AppConfig):
    name = "idempotency"
    verbose_name = "Idempotency"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from idempotency import checks  # noqa: F401  (registers the settings checks)

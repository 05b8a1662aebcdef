from django.apps import AppConfig


class IdempotencyConfig(AppConfig):
    name = "idempotency"
    verbose_name = "Idempotency"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # registers the settings checks and the databases' check
        from idempotency import checks, database_checks  # noqa: F401

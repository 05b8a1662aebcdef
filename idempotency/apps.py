from django.apps import AppConfig


class IdempotencyConfig(AppConfig):
    name = "idempotency"
    verbose_name = "Idempotency"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # registers the settings checks, the databases' check and the form pages' check
        from idempotency import checks, database_checks  # noqa: F401
        from idempotency.web import form_checks  # noqa: F401

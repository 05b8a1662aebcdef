from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from tenants import (  # noqa: F401 - schema extension, signals
            credential_signals,
            openapi,
            write_fence,
        )

        post_migrate.connect(write_fence.install, sender=self)

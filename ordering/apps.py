from django.apps import AppConfig


class OrderingConfig(AppConfig):
    name = "ordering"
    verbose_name = "Ordering"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the Celery tasks (they live in ordering.background, where Celery's
        # autodiscovery, which looks for <app>.tasks, would not find them).
        from ordering import checks  # noqa: F401 - registers the system checks
        from ordering.api import openapi  # noqa: F401 - schema extension
        from ordering.background import tasks  # noqa: F401
        from ordering.payments import departed
        from ordering.privacy import contact_retention, guest_orders

        contact_retention.register()
        guest_orders.register()
        departed.register()

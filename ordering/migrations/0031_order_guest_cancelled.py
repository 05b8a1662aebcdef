"""A partial index of guests' (and erased diners') cancelled orders, by id (the purge's batches
go in its order).

The guest order purge (every hour) and /metrics' count of its overdue rows (every scrape) looked
for guests' cancelled orders through the index of every guest's orders, or through every order
(15,100 or 30,100 rows read to find 100 in tests/data_protection/test_guest_order_plans.py).
Built ``CONCURRENTLY`` on PostgreSQL (``ordering.schema_operations``), as the orders' other
indexes.
"""

from django.db import migrations, models

from ordering.schema_operations import AddIndexWithoutLocking


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ordering", "0030_dinererasure_guest"),
    ]

    operations = [
        AddIndexWithoutLocking(
            model_name="order",
            index=models.Index(
                fields=["id"],
                condition=models.Q(status="CANCELLED")
                & (
                    models.Q(diner_id__startswith="guest_")
                    | models.Q(diner_id__startswith="erased-")
                ),
                name="order_guest_cancelled",
            ),
        ),
    ]

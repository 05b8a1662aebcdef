"""Indexes of each restaurant's orders newest first, all of them and the open ones.

The board's two windows (its newest orders, its newest open ones) and the order list's pages
walked the index of every restaurant's orders by creation, dropping the other restaurants'
rows (and the closed ones): a restaurant with no open order, or only old orders, had every
order of the platform read at each poll of each of its open boards. Built ``CONCURRENTLY`` on
PostgreSQL (``ordering.schema_operations``): the orders table is the largest and busiest.
"""

from django.db import migrations, models

from ordering.schema_operations import AddIndexWithoutLocking


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ordering", "0026_diner_data_export"),
        ("tenants", "0012_password_to_replace"),
    ]

    operations = [
        AddIndexWithoutLocking(
            model_name="order",
            index=models.Index(fields=["tenant", "-created_at", "-id"], name="order_tenant_newest"),
        ),
        AddIndexWithoutLocking(
            model_name="order",
            index=models.Index(
                condition=models.Q(
                    (
                        "status__in",
                        ("PAID", "ACCEPTED", "PREPARING", "READY", "DELIVERING", "CANCELLING"),
                    )
                ),
                fields=["tenant", "-created_at", "-id"],
                name="order_tenant_open_newest",
            ),
        ),
    ]

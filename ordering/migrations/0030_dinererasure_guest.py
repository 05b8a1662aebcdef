"""Whether an erasure erased a guest (``guest_…``), and an index of those by pseudonym.

An erased guest's orders carry the pseudonym; the retention purge finds the unpaid cancelled
ones through these rows (``ordering/privacy/guest_orders.py``), which a ``guest_`` prefix no
longer shows. ``db_default``: a release before this one inserts erasures without the column.
Erasures logged before this migration are taken as not a guest's (their ids are only hashed).
The index is built ``CONCURRENTLY`` on PostgreSQL (``ordering.schema_operations``).
"""

from django.db import migrations, models

from ordering.schema_operations import AddIndexWithoutLocking


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ordering", "0029_order_tenant_diner_status"),
    ]

    operations = [
        migrations.AddField(
            model_name="dinererasure",
            name="guest",
            field=models.BooleanField(db_default=False, default=False),
        ),
        AddIndexWithoutLocking(
            model_name="dinererasure",
            index=models.Index(
                condition=models.Q(("guest", True)),
                fields=["tenant", "pseudonym"],
                name="dinererasure_guest_pseudonym",
            ),
        ),
    ]

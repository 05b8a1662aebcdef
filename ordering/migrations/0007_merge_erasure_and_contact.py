"""Joins two migrations written side by side: the diner-erasure tables and the order's contact."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("ordering", "0006_erase_diner_erasures_offboarding"),
        ("ordering", "0006_policy_order_contact"),
    ]

    operations = []

"""Each duplicate's audit row carries the id of the event it records (unique per tenant), so
an event sent twice (a re-sent XADD, a fallback write of an append that landed) is one row."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency", "0006_live_record_exists_function"),
    ]

    operations = [
        migrations.AddField(
            model_name="duplicateaudit",
            name="event_id",
            field=models.CharField(blank=True, editable=False, max_length=32, null=True),
        ),
        migrations.AddConstraint(
            model_name="duplicateaudit",
            constraint=models.UniqueConstraint(
                fields=("tenant_key", "event_id"), name="uniq_audit_event"
            ),
        ),
    ]

"""An index of the hourly outcome counts by hour alone, for their retention purge.

The purge (``idempotency.purge.expired_outcome_counts``) and its overdue gauge, read at every
scrape of ``/metrics``, look for hours past the retention across every tenant, which the
``(tenant_key, hour)`` index does not serve. The table holds one row per tenant, endpoint,
outcome and hour, so building it takes a moment; a plain index, which the SQLite demo takes
too.
"""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("idempotency", "0011_audit_resource_ref_trigrams")]

    operations = [
        migrations.AddIndex(
            model_name="outcomecount",
            index=models.Index(fields=["hour"], name="outcome_count_hour"),
        ),
    ]

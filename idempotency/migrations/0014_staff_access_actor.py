"""An index of the staff access log by actor, for the admin's search by who looked.

The log is kept for good (a row per view of personal data and per export of audits), and the
admin found an actor's rows by reading all of them. A plain index: the log takes a row per
staff view, not per request, so a build's lock holds back no diner or merchant.
"""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("idempotency", "0013_audit_tenant_principal")]

    operations = [
        migrations.AddIndex(
            model_name="staffaccesslog",
            index=models.Index(fields=["actor"], name="staff_access_actor"),
        ),
    ]

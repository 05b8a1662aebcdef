"""Records keep the client key's digest instead of the raw key (issue 15: raw keys at rest).

Every existing row's ``key`` is rewritten once, unconditionally: a raw client key may itself
look like a digest (32 hex chars), so no row is skipped by its shape. The digest is spelled out
here, frozen, rather than imported: it must stay the one ``keys.key_digest`` had when this
migration ran. Rows are rewritten in batches by id so a large table never sits in memory.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.db import migrations, models

BATCH = 1000


def _key_digest(key: str) -> str:
    return hashlib.sha256(key.encode() + b"\x1f").hexdigest()[:32]


def digest_keys(apps: Any, schema_editor: Any) -> None:
    record_model = apps.get_model("idempotency", "IdempotencyRecord")
    rows = record_model.objects.using(schema_editor.connection.alias)
    last_id = 0
    while True:
        batch = list(rows.filter(id__gt=last_id).order_by("id").only("id", "key")[:BATCH])
        if not batch:
            return
        for record in batch:
            record.key = _key_digest(record.key)
        rows.bulk_update(batch, ["key"])
        last_id = batch[-1].id


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency", "0004_audit_stored_body_permission_staff_access_log"),
    ]

    operations = [
        migrations.RunPython(digest_keys, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="idempotencyrecord",
            name="key",
            field=models.CharField(
                help_text="key_digest() of the client's key: the raw key is not kept",
                max_length=255,
            ),
        ),
    ]

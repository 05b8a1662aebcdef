"""A function that refuses a record insert that found a live record (PostgreSQL only).

The engine can send its record insert and the transaction's ``COMMIT`` in one round trip
(``idempotency/stores/database.py``). The insert must then *fail* when a live record of the key
exists, so that the ``COMMIT`` behind it never runs: ``ON CONFLICT ... DO UPDATE ... WHERE``
inserts nothing in that case, and a statement around it calls this function, which raises
``unique_violation`` (what a plain duplicate insert raises, so callers handle one error).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION idempotency_live_record_exists() RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  RAISE EXCEPTION USING
    ERRCODE = 'unique_violation',
    MESSAGE = 'a live idempotency record of this key exists';
END
$$
"""
DROP = "DROP FUNCTION IF EXISTS idempotency_live_record_exists()"


def create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("idempotency", "0005_rawkeys_digest_record_keys")]

    operations = [migrations.RunPython(create, drop)]

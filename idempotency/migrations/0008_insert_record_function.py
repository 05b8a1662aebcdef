"""The record's insert as a function (PostgreSQL only), so the server plans it once per
connection instead of on every first execution.

The engine sends the record at the end of every first execution, with the transaction's
``COMMIT`` in the same query (``idempotency/stores/database.py``). A query of two statements
goes by the simple query protocol: the driver binds the values into its text and the server
parses and plans it again each time, and this one was large (``INSERT … ON CONFLICT … DO
UPDATE … WHERE <the old row expired>`` inside a ``WITH`` whose outer ``SELECT`` called
``idempotency_live_record_exists()`` when nothing was inserted). PL/pgSQL keeps the plan of the
``INSERT`` inside a function for the connection's life, so the query is now a short call
(what it saves: ``docs/benchmarks.md``).

It inserts the record or replaces an expired one and returns true; a live record of the key
makes it insert nothing and then, with ``refuse_live``, raise ``unique_violation`` (what a plain
duplicate insert raises, so callers handle one error, and the ``COMMIT`` behind it never runs),
and without it return false. A live record not committed yet makes it wait for the other
transaction, as the statement did.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION idempotency_insert_record(
  p_tenant_key varchar, p_scope varchar, p_key varchar, p_fingerprint varchar,
  p_fingerprint_version smallint, p_field_hashes jsonb, p_response_status smallint,
  p_response_headers jsonb, p_response_body bytea, p_resource_location varchar,
  p_created_at timestamptz, p_expires_at timestamptz, p_refuse_live boolean
) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  INSERT INTO idempotency_idempotencyrecord AS record (
    tenant_key, scope, key, fingerprint, fingerprint_version, field_hashes, response_status,
    response_headers, response_body, resource_location, created_at, expires_at
  ) VALUES (
    p_tenant_key, p_scope, p_key, p_fingerprint, p_fingerprint_version, p_field_hashes,
    p_response_status, p_response_headers, p_response_body, p_resource_location, p_created_at,
    p_expires_at
  )
  ON CONFLICT (tenant_key, scope, key) DO UPDATE SET
    fingerprint = EXCLUDED.fingerprint,
    fingerprint_version = EXCLUDED.fingerprint_version,
    field_hashes = EXCLUDED.field_hashes,
    response_status = EXCLUDED.response_status,
    response_headers = EXCLUDED.response_headers,
    response_body = EXCLUDED.response_body,
    resource_location = EXCLUDED.resource_location,
    created_at = EXCLUDED.created_at,
    expires_at = EXCLUDED.expires_at
  WHERE record.expires_at <= EXCLUDED.created_at;
  IF FOUND THEN
    RETURN true;
  END IF;
  IF p_refuse_live THEN
    RAISE EXCEPTION USING
      ERRCODE = 'unique_violation',
      MESSAGE = 'a live idempotency record of this key exists';
  END IF;
  RETURN false;
END
$$
"""
DROP = """
DROP FUNCTION IF EXISTS idempotency_insert_record(
  varchar, varchar, varchar, varchar, smallint, jsonb, smallint, jsonb, bytea, varchar,
  timestamptz, timestamptz, boolean
)
"""
# The statement's helper, which the function replaces (migration 0006; back on reversal).
OLD = "DROP FUNCTION IF EXISTS idempotency_live_record_exists()"


def create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)
        schema_editor.execute(OLD)


def drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        from importlib import import_module

        previous = import_module("idempotency.migrations.0006_live_record_exists_function")
        schema_editor.execute(previous.CREATE)
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("idempotency", "0007_audit_event_id")]

    operations = [migrations.RunPython(create, drop)]

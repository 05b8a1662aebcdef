"""Migration 0009: entries of the admin's action log that named a diner session by its
restaurant and diner id name it by its id, so the log keeps no diner id past an erasure."""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone

from tests.support.migrations import migrate_to

# with the log's and content types' own latest schema
BEFORE = [
    ("tenants", "0008_tenant_uniq_tenant_slug_ignoring_case"),
    ("contenttypes", "0002_remove_content_type_name"),
    ("admin", "0003_logentry_add_action_flag_choices"),
]
AFTER = [("tenants", "0009_admin_log_without_diner_ids")]


@pytest.mark.django_db(transaction=True)
def test_logged_sessions_are_named_by_their_id(back_to_latest: None) -> None:
    old = migrate_to(BEFORE)
    content_types = old.get_model("contenttypes", "ContentType").objects
    session_type = content_types.get_or_create(app_label="tenants", model="dinersession")[0]
    tenant_type = content_types.get_or_create(app_label="tenants", model="tenant")[0]
    staff = old.get_model("auth", "User").objects.create(username="staff")
    log = old.get_model("admin", "LogEntry").objects
    session_id = str(uuid.uuid4())

    def entry(content_type, object_id: str, text: str):
        return log.create(
            action_time=timezone.now(),
            user=staff,
            content_type=content_type,
            object_id=object_id,
            object_repr=text,
            action_flag=2,
            change_message="[]",
        )

    session_entry = entry(session_type, session_id, f"Trattoria Roma:zoe ({session_id})")
    tenant_entry = entry(tenant_type, "1", "Trattoria Roma")
    new = migrate_to(AFTER).get_model("admin", "LogEntry").objects
    assert new.get(pk=session_entry.pk).object_repr == f"diner session {session_id}"
    assert new.get(pk=tenant_entry.pk).object_repr == "Trattoria Roma"  # other entries untouched

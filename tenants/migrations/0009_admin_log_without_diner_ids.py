"""The admin's action log named a diner session by its restaurant and diner id, and kept that
text after the diner was erased: rewrite those entries as the session's id, as the model's
``__str__`` now names it."""

from django.db import migrations
from django.db.models import F, Value
from django.db.models.functions import Concat


def name_sessions_by_id(apps, schema_editor):
    content_type = (
        apps.get_model("contenttypes", "ContentType")
        .objects.filter(app_label="tenants", model="dinersession")
        .first()
    )
    if content_type is None:  # a new database: nothing was logged yet
        return
    apps.get_model("admin", "LogEntry").objects.filter(content_type=content_type).update(
        object_repr=Concat(Value("diner session "), F("object_id"))
    )


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0008_tenant_uniq_tenant_slug_ignoring_case"),
        ("admin", "0003_logentry_add_action_flag_choices"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(name_sessions_by_id, migrations.RunPython.noop)]

"""The staff workflow for Lua script versions in the Django admin."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.test import Client

from idempotency.models import LuaScriptChange, LuaScriptVersion
from idempotency.scripts.registry import registry, sha256_of
from idempotency.scripts.versions import record_contract_pass, shipped_source, upload_version

pytestmark = pytest.mark.django_db
ADD = "/admin/idempotency/luascriptversion/add/"
LIST = "/admin/idempotency/luascriptversion/"
V2 = "-- v2\n" + shipped_source("claim")
SHIPPED_CLAIM_SHA256 = sha256_of(shipped_source("claim"))


@pytest.fixture
def staff(client):
    client.force_login(User.objects.create_superuser("ops", password="pw-123456"))
    return client


def staff_with(*codenames: str) -> Client:
    """A logged-in staff user (not a superuser) holding these permissions of the model."""
    user = User.objects.create_user(f"staff-{len(codenames)}", password="pw-123456", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="idempotency", codename__in=codenames)
    )
    browser = Client()
    browser.force_login(user)
    return browser


def test_upload_through_the_admin_compiles_and_records_the_author(staff):
    r = staff.post(ADD, {"name": "claim", "source": V2, "reviewed_sha256": sha256_of(V2)})
    assert r.status_code == 302
    script = LuaScriptVersion.objects.get()
    assert (script.name, script.version, script.author, script.state) == (
        "claim",
        1,
        "ops",
        "draft",
    )
    assert LuaScriptChange.objects.get().author == "ops"


@pytest.mark.parametrize(
    "reviewed, message",
    [
        pytest.param("", b"This field is required", id="missing"),
        pytest.param("0" * 64, b"SHA-256 mismatch", id="different"),
        # red: 500, hmac.compare_digest refuses to compare text that is not ASCII
        pytest.param("\u00e9" * 64, b"SHA-256 mismatch", id="not-ascii"),
    ],
)
def test_an_upload_without_the_reviewed_sha256_is_refused(staff, reviewed, message):
    r = staff.post(ADD, {"name": "claim", "source": V2, "reviewed_sha256": reviewed})
    assert r.status_code == 200 and message in r.content
    assert LuaScriptVersion.objects.count() == 0


def test_a_broken_upload_shows_the_redis_error_and_saves_nothing(staff):
    source = "return {"
    r = staff.post(ADD, {"name": "claim", "source": source, "reviewed_sha256": sha256_of(source)})
    assert r.status_code == 200
    assert b"Redis refused the script" in r.content
    assert LuaScriptVersion.objects.count() == 0


def test_only_the_scripts_the_engine_calls_can_be_uploaded(staff):
    form = staff.get(ADD).content.decode()
    assert 'value="claim"' in form and 'value="finish"' in form and 'value="release"' in form
    assert "backfill" not in form
    source = "return 1"
    r = staff.post(
        ADD, {"name": "backfill", "source": source, "reviewed_sha256": sha256_of(source)}
    )
    assert r.status_code == 200 and LuaScriptVersion.objects.count() == 0


def act(browser: Client, action: str, script: LuaScriptVersion, **fields: str):
    return browser.post(
        LIST, {"action": action, "_selected_action": [script.pk], **fields}, follow=True
    )


def test_canary_promote_and_rollback_actions(staff):
    script = upload_version(name="claim", source=V2, author="ops", reviewed_sha256=sha256_of(V2))
    # promote is refused before the contract tests passed
    r = act(staff, "promote_to_stable", script, apply="1", reviewed_sha256=script.sha256)
    assert b"has not passed the contract tests" in r.content
    record_contract_pass(script, author="ci")
    # canary: the intermediate form, then the audience is saved
    form = act(staff, "canary", script)
    assert form.status_code == 200 and b"Start canary" in form.content
    act(
        staff,
        "canary",
        script,
        apply="1",
        reviewed_sha256=script.sha256,
        percent="5",
        tenants="7, 9",
        regions="eu-north",
    )
    script.refresh_from_db()
    assert (script.state, script.canary_percent, script.canary_tenants, script.canary_regions) == (
        "canary",
        5,
        ["7", "9"],
        ["eu-north"],
    )
    act(staff, "promote_to_stable", script, apply="1", reviewed_sha256=script.sha256)
    script.refresh_from_db()
    assert script.state == "stable"
    confirm = act(staff, "roll_back", script)
    assert b"runs the shipped script" in confirm.content
    act(staff, "roll_back", script, apply="1", reviewed_sha256=SHIPPED_CLAIM_SHA256)
    script.refresh_from_db()
    assert script.state == "retired"
    assert list(LuaScriptChange.objects.order_by("id").values_list("action", "author")) == [
        ("upload", "ops"),
        ("contract_passed", "ci"),
        ("canary", "ops"),
        ("promote", "ops"),
        ("rollback", "ops"),
    ]


@pytest.mark.parametrize("action", ["canary", "promote_to_stable", "roll_back"])
@pytest.mark.parametrize(
    "reviewed", ["", "0" * 64, "\u00e9" * 64], ids=["missing", "different", "not-ascii"]
)
def test_every_action_needs_the_reviewed_sha256_of_what_goes_live(staff, action, reviewed):
    script = upload_version(name="claim", source=V2, author="ops", reviewed_sha256=sha256_of(V2))
    record_contract_pass(script, author="ci")
    if action == "roll_back":
        act(staff, "promote_to_stable", script, apply="1", reviewed_sha256=script.sha256)
    before = list(LuaScriptVersion.objects.values_list("pk", "state", "canary_percent"))

    act(staff, action, script, apply="1", reviewed_sha256=reviewed, percent="100")

    assert list(LuaScriptVersion.objects.values_list("pk", "state", "canary_percent")) == before


def test_staff_with_view_permission_only_cannot_change_what_runs():
    """The reproduced attack: a staff user who may only view script versions set a 100 %
    canary, promoted two versions and rolled back, and live traffic ran the promoted script."""
    first = upload_version(name="claim", source=V2, author="ops", reviewed_sha256=sha256_of(V2))
    second_source = V2 + "-- v3\n"
    second = upload_version(
        name="claim", source=second_source, author="ops", reviewed_sha256=sha256_of(second_source)
    )
    for script in (first, second):
        record_contract_pass(script, author="ci")
    viewer = staff_with("view_luascriptversion")
    assert viewer.get(LIST).status_code == 200  # reading is allowed

    act(viewer, "canary", first, apply="1", reviewed_sha256=first.sha256, percent="100")
    act(viewer, "promote_to_stable", first, apply="1", reviewed_sha256=first.sha256)
    act(viewer, "promote_to_stable", second, apply="1", reviewed_sha256=second.sha256)
    act(viewer, "roll_back", second, apply="1", reviewed_sha256=first.sha256)
    upload = viewer.post(ADD, {"name": "claim", "source": V2, "reviewed_sha256": sha256_of(V2)})

    assert upload.status_code == 403
    assert set(LuaScriptVersion.objects.values_list("state", flat=True)) == {"draft"}
    assert LuaScriptVersion.objects.count() == 2
    registry.reload()
    assert registry.choose("claim", tenant_key="1", region=None).version == 0


def test_the_actions_are_superuser_only_whatever_the_model_permissions():
    script = upload_version(name="claim", source=V2, author="ops", reviewed_sha256=sha256_of(V2))
    record_contract_pass(script, author="ci")
    editor = staff_with(
        "view_luascriptversion",
        "add_luascriptversion",
        "change_luascriptversion",
        "delete_luascriptversion",
    )

    listing = editor.get(LIST).content.decode()
    act(editor, "promote_to_stable", script, apply="1", reviewed_sha256=script.sha256)

    for action in ("canary", "promote_to_stable", "roll_back"):
        assert f'value="{action}"' not in listing
    assert editor.get(ADD).status_code == 403
    script.refresh_from_db()
    assert script.state == "draft"


class AccountWithoutSuperuserFlag:
    """A staff member of a site whose custom user model is an ``AbstractBaseUser`` without
    ``PermissionsMixin``: what Django's admin documents it needs (``is_active``, ``is_staff``,
    ``has_perm``, ``has_module_perms``), and no ``is_superuser``."""

    is_active = is_staff = is_authenticated = True
    is_anonymous = False
    pk = 1

    def has_perm(self, perm: str, obj: object = None) -> bool:
        return True

    def has_module_perms(self, app_label: str) -> bool:
        return True

    def get_username(self) -> str:
        return "ops@example.com"


@pytest.mark.parametrize("path", ["/admin/", LIST])
def test_a_custom_user_model_without_a_superuser_flag_reaches_the_admin(rf, path):
    """(red: 500 on every admin page, the index included: 'Account' object has no attribute
    'is_superuser') Such a user is no superuser: the scripts stay read-only to them."""
    script = upload_version(name="claim", source=V2, author="ops", reviewed_sha256=sha256_of(V2))
    request = rf.get(path)
    request.user = AccountWithoutSuperuserFlag()
    if path == LIST:
        page = admin.site._registry[LuaScriptVersion].changelist_view(request)
    else:
        page = admin.site.index(request)
    page.render()
    assert page.status_code == 200
    assert f"{script.pk}/change/" in page.content.decode() or path == "/admin/"
    assert ADD not in page.content.decode()
    assert 'value="promote_to_stable"' not in page.content.decode()


def test_non_staff_cannot_reach_the_scripts(client):
    client.force_login(User.objects.create_user("merchant", password="pw-123456"))
    assert client.get(LIST).status_code == 302


LONG = b"Each of at most 64 characters"


def many(what: str) -> bytes:
    return f"At most 1,000 {what}, comma-separated".encode()


@pytest.mark.parametrize(
    ("field", "typed", "message"),
    [
        pytest.param(
            "tenants", ",".join(str(n) for n in range(1001)), many("tenant ids"), id="1001-tenants"
        ),
        pytest.param("tenants", "t" * 65, LONG, id="a-tenant-id-of-65"),
        pytest.param(
            "regions", ",".join(f"r{n}" for n in range(1001)), many("regions"), id="1001-regions"
        ),
        pytest.param("regions", "r" * 65, LONG, id="a-region-of-65"),
    ],
)
def test_a_canary_audience_is_bounded(staff, field, typed, message):
    """At most 1,000 tenant ids and 1,000 regions, each of at most 64 characters (as a tenant's
    key is): every process holds the audience in memory and the change log keeps it (red:
    saved as typed, 50,000 ids of a 250 KB form as readily as one)."""
    script = upload_version(name="claim", source=V2, author="ops", reviewed_sha256=sha256_of(V2))
    record_contract_pass(script, author="ci")
    fields = {"apply": "1", "reviewed_sha256": script.sha256, "percent": "0", field: typed}

    r = act(staff, "canary", script, **fields)

    assert r.status_code == 200 and message in r.content
    script.refresh_from_db()
    assert (script.state, script.canary_tenants, script.canary_regions) == ("draft", [], [])
    assert sorted(LuaScriptChange.objects.values_list("action", flat=True)) == [
        "contract_passed",
        "upload",
    ]

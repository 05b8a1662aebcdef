"""Changing the engine's Lua scripts: upload, canary, promote, roll back — each audited.

Safety rails:
- only claim, finish and release can be versioned (``VERSIONED_SCRIPTS``); the token and
  rate-limit scripts run as shipped;
- a version is compiled by Redis (``SCRIPT LOAD`` on a connection of its own) before it is
  saved, and refused with Redis's own error message if it does not compile;
- every change names the SHA-256 of the source it makes live, as the person making it reviewed
  it: the upload (the new source), canary and promote (the version's source, re-hashed from the
  row), roll back (what runs after it). A missing or different SHA-256 refuses the change;
- a version must have passed the engine's contract tests (``manage.py check_lua_version``)
  before it can become canary or stable;
- promoting loads the script on every Redis node, so the first EVALSHA finds it (and NOSCRIPT
  after a restart or failover is handled by reloading anyway).
"""

from __future__ import annotations

import hmac
from typing import Any

import redis
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from idempotency.core.conf import engine_hook
from idempotency.models import LuaScriptChange, LuaScriptVersion
from idempotency.scripts.registry import (
    VERSIONED_SCRIPTS,
    ScriptRef,
    announce,
    registry,
    sha256_of,
    shipped,
)

KNOWN_SCRIPTS = VERSIONED_SCRIPTS
State = LuaScriptVersion.State


class ScriptRejected(ValueError):
    """The version cannot be saved or moved; the message says why."""


def upload_version(
    *, name: str, source: str, author: str, reviewed_sha256: str
) -> LuaScriptVersion:
    if name not in KNOWN_SCRIPTS:
        raise ScriptRejected(f"unknown script {name!r}; one of {', '.join(KNOWN_SCRIPTS)}")
    digest = sha256_of(source)
    check_reviewed(reviewed_sha256, digest, what="the uploaded source")
    redis_sha1 = compile_script(source)
    for _ in range(3):  # two uploads at once: the unique (name, version) decides, retry
        try:
            with transaction.atomic():
                latest = LuaScriptVersion.objects.filter(name=name).aggregate(v=Max("version"))
                script = LuaScriptVersion.objects.create(
                    name=name,
                    version=(latest["v"] or 0) + 1,
                    source=source,
                    sha256=digest,
                    redis_sha1=redis_sha1,
                    author=author,
                )
                _audit(script, "upload", author, sha256=digest)
                return script
        except IntegrityError:
            continue
    raise ScriptRejected("could not allocate a version number; try again")


def compile_script(source: str) -> str:
    """Have Redis compile ``source`` on a fresh connection; its SHA1, or ScriptRejected."""
    clients = _all_clients()
    if not clients:
        raise ScriptRejected("no Redis configured: a script cannot be compiled")
    kwargs = _connection_kwargs(clients[0])
    scratch = redis.Redis(**kwargs)
    try:
        return scratch.script_load(source)
    except redis.ResponseError as exc:
        raise ScriptRejected(f"Redis refused the script: {exc}") from exc
    finally:
        scratch.close()


def record_contract_pass(script: LuaScriptVersion, *, author: str) -> None:
    LuaScriptVersion.objects.filter(pk=script.pk).update(contract_passed_at=timezone.now())
    _audit(script, "contract_passed", author)


def check_reviewed(reviewed_sha256: str, actual: str, *, what: str) -> None:
    """Refuse a change unless its author named the SHA-256 of what it makes live. Compared as
    UTF-8 bytes: :func:`hmac.compare_digest` raises ``TypeError`` for text that is not ASCII,
    so 64 accented letters typed in the admin's field were a 500, not a mismatch."""
    given = (reviewed_sha256 or "").strip().lower()
    if not given:
        raise ScriptRejected(f"the SHA-256 you reviewed of {what} is required")
    if not hmac.compare_digest(given.encode(), actual.encode()):
        raise ScriptRejected(f"SHA-256 mismatch: {what} hashes to {actual}")


def start_canary(
    script: LuaScriptVersion,
    *,
    author: str,
    reviewed_sha256: str,
    percent: int = 0,
    tenants: list[str] | None = None,
    regions: list[str] | None = None,
) -> None:
    """Make ``script`` the canary of its name for the given audience (replacing any canary)."""
    _require_reviewed_version(script, reviewed_sha256)
    _require_contract_pass(script)
    if not 0 <= percent <= 100:
        raise ScriptRejected("percent must be 0..100")
    _load_everywhere(script.source)
    with transaction.atomic():
        _lock_versions(script.name)
        LuaScriptVersion.objects.filter(name=script.name, state=State.CANARY).exclude(
            pk=script.pk
        ).update(state=State.DRAFT, canary_percent=0)
        LuaScriptVersion.objects.filter(pk=script.pk).update(
            state=State.CANARY,
            canary_percent=percent,
            canary_tenants=[str(t) for t in tenants or []],
            canary_regions=[str(r) for r in regions or []],
        )
        _audit(script, "canary", author, percent=percent, tenants=tenants, regions=regions)
        transaction.on_commit(_changed)


def promote(script: LuaScriptVersion, *, author: str, reviewed_sha256: str) -> None:
    """Make ``script`` the stable version of its name; the previous stable is retired."""
    _require_reviewed_version(script, reviewed_sha256)
    _require_contract_pass(script)
    _load_everywhere(script.source)
    with transaction.atomic():
        _lock_versions(script.name)
        LuaScriptVersion.objects.filter(name=script.name, state=State.STABLE).update(
            state=State.RETIRED
        )
        LuaScriptVersion.objects.filter(pk=script.pk).update(state=State.STABLE, canary_percent=0)
        _audit(script, "promote", author)
        transaction.on_commit(_changed)


def rollback_target(name: str) -> ScriptRef:
    """What runs after :func:`rollback` of ``name``: with a canary, the stable version (the
    canary's tenants go back to it); otherwise the highest retired version older than the
    stable one, or the shipped file (version 0)."""
    canary = LuaScriptVersion.objects.filter(name=name, state=State.CANARY).first()
    stable = LuaScriptVersion.objects.filter(name=name, state=State.STABLE).first()
    if canary is not None:
        target = stable
    elif stable is not None:
        target = (
            LuaScriptVersion.objects.filter(
                name=name, state=State.RETIRED, version__lt=stable.version
            )
            .order_by("-version")
            .first()
        )
    else:
        raise ScriptRejected(f"{name} runs the shipped script: there is nothing to roll back")
    if target is None:
        return shipped(name)
    return ScriptRef(name=name, version=target.version, source=target.source)


def rollback(*, name: str, author: str, reviewed_sha256: str) -> LuaScriptVersion | None:
    """Undo the last step of ``name``: drop the canary if there is one; otherwise retire the
    stable version and bring back the highest older retired one (or the shipped script). Returns the
    version that stable calls use now (None: the shipped file). ``reviewed_sha256`` names what
    runs afterwards (:func:`rollback_target`)."""
    with transaction.atomic():
        _lock_versions(name)
        target = rollback_target(name)
        check_reviewed(reviewed_sha256, sha256_of(target.source), what=_label(target))
        canary = LuaScriptVersion.objects.filter(name=name, state=State.CANARY).first()
        stable = LuaScriptVersion.objects.filter(name=name, state=State.STABLE).first()
        if canary is not None:
            LuaScriptVersion.objects.filter(pk=canary.pk).update(
                state=State.RETIRED, canary_percent=0
            )
            _audit(canary, "rollback_canary", author)
        elif stable is not None:
            LuaScriptVersion.objects.filter(pk=stable.pk).update(state=State.RETIRED)
            previous = (
                LuaScriptVersion.objects.filter(
                    name=name, state=State.RETIRED, version__lt=stable.version
                )
                .order_by("-version")
                .first()
            )
            if previous is not None:
                LuaScriptVersion.objects.filter(pk=previous.pk).update(state=State.STABLE)
            _audit(stable, "rollback", author, restored=previous.version if previous else 0)
            stable = previous
        transaction.on_commit(_changed)
    return stable


def _lock_versions(name: str) -> None:
    """Lock every version of ``name`` until the caller's transaction ends, in primary-key
    order. Canary, promote and rollback each read which version is stable or canary, then
    move them: two at once (two staff confirming at the same instant) read the same state,
    and the second's writes, waiting on the first's, then broke a one-stable (one-canary)
    constraint, or, for a rollback, would take a second step its author never reviewed.
    Taken first, the second reads what the first left (a rollback's target then differs
    from the one reviewed: refused)."""
    list(
        LuaScriptVersion.objects.select_for_update()
        .filter(name=name)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def _label(ref: ScriptRef) -> str:
    return f"{ref.name} v{ref.version}" if ref.version else f"the shipped {ref.name}.lua"


def _require_reviewed_version(script: LuaScriptVersion, reviewed_sha256: str) -> None:
    """The row's source, hashed now (not the stored digest alone: a row changed outside this
    workflow must not go live), is the one its author reviewed."""
    script.refresh_from_db(fields=["source", "sha256"])
    actual = sha256_of(script.source)
    if actual != script.sha256:
        raise ScriptRejected(f"{script} was changed after its upload; upload it again")
    check_reviewed(reviewed_sha256, actual, what=str(script))


def _require_contract_pass(script: LuaScriptVersion) -> None:
    script.refresh_from_db(fields=["contract_passed_at"])
    if script.contract_passed_at is None:
        raise ScriptRejected(
            f"{script} has not passed the contract tests "
            f"(manage.py check_lua_version {script.name} {script.version})"
        )


def _load_everywhere(source: str) -> None:
    for client in _all_clients():
        client.script_load(source)


def _changed() -> None:
    registry.reload()
    announce()


def _audit(script: LuaScriptVersion, action: str, author: str, **detail: Any) -> None:
    LuaScriptChange.objects.create(script=script, action=action, author=author, detail=detail)


def _all_clients() -> list[Any]:
    hook = engine_hook("ALL_REDIS_CLIENTS")
    return list(hook()) if hook else []


def _connection_kwargs(client: Any) -> dict[str, Any]:
    if hasattr(client, "connection_pool"):
        kwargs = dict(client.connection_pool.connection_kwargs)
    else:  # RedisCluster: any primary compiles like all of them
        node = client.get_default_node()
        kwargs = {"host": node.host, "port": node.port}
    return {k: kwargs[k] for k in ("host", "port", "db", "password", "username") if k in kwargs}


def shipped_source(name: str) -> str:
    """The script as shipped in the package (the base a new version usually starts from)."""
    return shipped(name).source

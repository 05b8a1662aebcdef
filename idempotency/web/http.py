"""From an HTTP request to an :class:`~idempotency.core.engine.IdempotentRequest`.

Shared by the DRF decorator (:mod:`idempotency.web.drf`) and the plain-Django form decorator
(:mod:`idempotency.web.forms`): validate the key (or derive the automatic one), scope it,
fingerprint the business payload. A key that is a pre-issued token (``tok_…``) must carry our
signature for this tenant and principal; the claim then consumes it.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import re
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.core.exceptions import ImproperlyConfigured
from django.core.files.uploadedfile import UploadedFile
from django.http import HttpRequest, HttpResponse

from idempotency import metrics
from idempotency.core import responses, tokens
from idempotency.core.conf import Policy, caller_scope, engine_hook, engine_setting
from idempotency.core.engine import IdempotentRequest
from idempotency.core.error_codes import IdempotencyErrorCode
from idempotency.core.fingerprint import (
    field_hashes,
    key_id_of,
    keyed_fingerprints,
    keyed_version,
)
from idempotency.core.hashing import hash_keys, key_by_id
from idempotency.core.keys import (
    MAX_TENANT_LENGTH,
    SCOPE_SEPARATOR,
    TENANT_TAG_CHARACTERS,
    InvalidKey,
    ScopedKey,
    automatic_key,
    validate_key,
)
from idempotency.core.tenant_policy import tenant_record_ttl

KEY_HEADER = "HTTP_IDEMPOTENCY_KEY"

logger = logging.getLogger(__name__)


def first_parameter(view: Callable[..., Any]) -> str | None:
    """The name of the view's first parameter as written (not through ``functools.wraps``:
    ``method_decorator`` hands a decorator the bound method, wrapped to look like the method)."""
    try:
        parameters = list(inspect.signature(view, follow_wrapped=False).parameters.values())
    except (TypeError, ValueError):  # a builtin or a callable without a signature
        return None
    return parameters[0].name if parameters else None


def refuse_async(view: Callable[..., Any], *, decorator: str) -> None:
    """The engine runs a view inside its database transaction and stores the response it
    returns: an ``async def`` view returns a coroutine, which it can do neither with. Refused
    when the module is imported, not at the first request (a 500)."""
    if iscoroutinefunction(view):
        raise ImproperlyConfigured(
            f"{decorator} cannot decorate {view.__qualname__}, an async view: the engine "
            "protects sync views only (def, not async def)"
        )


def business_payload(
    data: Any, fields: tuple[str, ...] | None, path: dict[str, Any], *, with_files: bool = False
) -> dict[str, Any]:
    """The declared body fields plus the path parameters (the order id is part of "pay").
    An uploaded file counts as its name and the SHA-256 of its content (a multipart body's
    values are lists, a file's too). Only a request that sent files (``with_files``) is walked
    for them: a JSON body, every API write's, holds none.

    ``fields`` pick from a body that is an object; a body that is not (a JSON array, a bulk
    create) has no fields to pick and counts whole: picked from it, every field was None, and
    a key reused with another array replayed the first answer instead of 422. A body parsed
    as bytes counts whole as their SHA-256."""
    if isinstance(data, bytes | bytearray | memoryview):
        # a parser that hands the view the raw bytes (a webhook's, signed over them): they
        # have no canonical form of their own, and every such body was refused as ambiguous
        data = hashlib.sha256(data).hexdigest()
    is_object = hasattr(data, "keys")
    body = dict(data) if is_object else {"body": data}
    if fields is not None and is_object:
        body = {name: body.get(name) for name in fields}
    if with_files:
        body = {name: _uploads_digested(value) for name, value in body.items()}
    body["path"] = {name: str(value) for name, value in path.items()}
    return body


def _uploads_digested(value: Any) -> Any:
    """``value`` with each uploaded file in it (or in its list) as ``{"name", "sha256"}``: a
    file has no canonical form of its own, and every upload was refused as a body with none.
    The file is read in chunks and rewound, so the view reads it whole."""
    if isinstance(value, list):
        return [_uploads_digested(item) for item in value]
    if not isinstance(value, UploadedFile):
        return value
    digest = hashlib.sha256()
    for chunk in value.chunks():
        digest.update(chunk)
    value.seek(0)
    return {"name": value.name, "sha256": digest.hexdigest()}


def prepare(
    request: HttpRequest,
    *,
    policy: Policy,
    payload: dict[str, Any],
    raw_key: str | None,
    render_pointer: Callable[[str], HttpResponse | None] | None = None,
    recall: Callable[[], HttpResponse | None] | None = None,
) -> IdempotentRequest | HttpResponse | None:
    """The engine request; a 400 refusal; or None when the request is not idempotent
    (no tenant identity, or no key on an endpoint that neither requires nor derives one).
    ``render_pointer``: how a replay of a body stored as a resource URL renders it afresh.
    ``recall``: the endpoint's answer for a key it remembers doing its work, asked when a
    token is unknown to Redis and has no record (else None)."""
    identity = caller_scope(request)
    if identity is None:
        return None
    tenant, principal = identity
    refusal = identity_refusal(tenant, principal)
    if refusal is not None:
        return refusal
    keys = hash_keys()
    version = keyed_version(keys[0].id)
    try:
        # the per-field hashes render the same values: they are computed when first needed
        fingerprints = keyed_fingerprints(payload, None, [(k.id, k.secret) for k in keys])
    except (ValueError, TypeError, RecursionError) as exc:
        # e.g. two keys equal after Unicode normalisation: the operation has no canonical form
        return responses.problem(
            400, IdempotencyErrorCode.PAYLOAD_INVALID, f"The request body is ambiguous: {exc}"
        )
    unverified: HttpResponse | None = None
    if raw_key is not None:
        try:
            key = validate_key(raw_key)
        except InvalidKey as exc:
            metrics.count(tenant=tenant, endpoint=_endpoint(request), outcome="INVALID")
            return responses.problem(400, IdempotencyErrorCode.KEY_INVALID, str(exc))
        if tokens.is_token(key):
            try:
                tokens.verify_token(key, tenant=tenant, principal=principal)
            except tokens.InvalidToken as exc:
                unverified = responses.problem(400, IdempotencyErrorCode.TOKEN_INVALID, str(exc))
    elif policy.auto_key_window:
        key = automatic_key(fingerprints[version])
    elif policy.required:
        metrics.count(tenant=tenant, endpoint=_endpoint(request), outcome="INVALID")
        return responses.problem(
            400, IdempotencyErrorCode.KEY_MISSING, "This endpoint requires an Idempotency-Key"
        )
    else:
        return None
    route = _route(request)
    scoped = ScopedKey(
        tenant=tenant,
        principal=principal,
        method=_method(request),
        route=route,
        key=key,
        buckets=engine_setting("HOT_TENANT_BUCKETS").get(tenant, 1),
        automatic=raw_key is None,
    )
    token = None
    if tokens.is_token(key) and unverified is None:
        token = tokens.token_use(
            tenant=tenant,
            principal=principal,
            token=key,
            claim_key=scoped.redis_key,
            # the "used" mark lives as long as the result it guards
            mark_ttl_seconds=policy.effective_ttl(
                automatic=False, tenant_ttl=tenant_record_ttl(tenant)
            ),
            buckets=scoped.buckets,
        )
    return IdempotentRequest(
        scoped=scoped,
        fingerprints=fingerprints,
        policy=policy,
        endpoint=_endpoint(request),
        request_meta=request_meta(request),
        token=token,
        region=_resolve("TENANT_REGION", tenant),
        script_pin=script_pin(request),
        fingerprint_version=version,
        field_hashes_under=lambda other: _field_hashes_under(payload, other),
        render_pointer=render_pointer,
        recall=recall,
        unverified_token=unverified,
    )


def identity_refusal(tenant: str, principal: str) -> HttpResponse | None:
    """The 400 for a tenant or principal the engine cannot keep apart from another's, else
    None: asked before any view runs or any token is issued."""
    if len(tenant) > MAX_TENANT_LENGTH:
        # its record would fail to insert after the view ran: a 500 on every request
        return _unusable_identity(
            IdempotencyErrorCode.TENANT_INVALID,
            f"a tenant of {len(tenant)} characters (at most {MAX_TENANT_LENGTH})",
            tenant,
        )
    if any(c in tenant for c in TENANT_TAG_CHARACTERS):
        # its Redis keys would read as another tenant's: tenant "a"'s erasure would take
        # those of "a:eu" or "a}eu", and "a:1"'s would be those of "a"'s first sub-bucket
        return _unusable_identity(
            IdempotencyErrorCode.TENANT_INVALID,
            f"a tenant holding one of {TENANT_TAG_CHARACTERS!r}",
            tenant,
        )
    if SCOPE_SEPARATOR in principal:
        # its scopes would read as another principal's: erasing principal "a" would take the
        # records of "a|b" too, and "a|b"'s retry would run again
        return _unusable_identity(
            IdempotencyErrorCode.PRINCIPAL_INVALID,
            f"a principal holding {SCOPE_SEPARATOR!r}",
            principal,
        )
    return None


def _unusable_identity(code: IdempotencyErrorCode, what: str, value: str) -> HttpResponse:
    """The refusal, before the view runs, of a request whose tenant or principal the engine
    cannot keep apart (``what`` says why). The host's resolver is at fault, not the client, so
    it is also logged as an error (a 400 alone would not page anyone)."""
    logger.error('IDEMPOTENCY["SCOPE_RESOLVER"] gave %s: %.80r…', what, value)
    return responses.problem(
        400,
        code,
        f"This site's identifiers for the caller are not usable ({what}): the request cannot "
        "be made idempotent, and nothing was done.",
    )


SCRIPT_PIN_HEADER = "HTTP_X_LUA_VERSION"
# A version number as the versions' table holds it (a positive 32-bit integer): ASCII digits
# only. ``str.isdigit`` also holds for "²" (a header's latin-1 byte 0xB2) and for thousands of
# digits, and ``int()`` of either raised, a 500 for every request the pin was honoured on.
_SCRIPT_PIN = re.compile(r"[0-9]{1,10}")


def script_pin(request: HttpRequest) -> int | None:
    """The Lua script version an ``X-Lua-Version`` header pins, honoured only for the callers
    ``SCRIPT_PIN_ALLOWED`` approves (staff, test API clients); ignored for everyone else, and
    so is a value that is no version number."""
    raw = request.META.get(SCRIPT_PIN_HEADER, "")
    if _SCRIPT_PIN.fullmatch(raw) is None or not _resolve("SCRIPT_PIN_ALLOWED", request):
        return None
    return int(raw)


def _resolve(setting: str, arg: Any) -> Any:
    hook = engine_hook(setting)
    return hook(arg) if hook else None


def request_meta(request: HttpRequest) -> dict[str, str]:
    """What an audit keeps about the caller (no body, no credentials).

    The request id is the one the host's request-logging middleware assigned
    (``request.request_id``: the caller's ``X-Request-ID`` when sane, else a fresh one, as in
    the logs and the response header), so an audit leads to the request's log lines."""
    meta = request.META
    request_id = getattr(request, "request_id", "") or meta.get("HTTP_X_REQUEST_ID", "")
    return {
        "remote_addr": meta.get("REMOTE_ADDR", ""),
        "user_agent": meta.get("HTTP_USER_AGENT", "")[:200],
        "request_id": str(request_id)[:100],
    }


def _field_hashes_under(payload: dict[str, Any], version: int) -> dict[str, str]:
    """The per-field hashes under another (older) version's key; ValueError if that key is
    no longer configured."""
    key_id = key_id_of(version)
    key = key_by_id(key_id) if key_id is not None else None
    if key_id is not None and key is None:
        raise ValueError(f"hash key {key_id} is no longer configured")
    return field_hashes(payload, None, secret=key.secret if key else None, version=version)


def _route(request: HttpRequest) -> str:
    return request.resolver_match.route if request.resolver_match else request.path


def _method(request: HttpRequest) -> str:
    """The method a key is scoped by. A HEAD is its GET's: Django answers a HEAD with the
    view's ``get`` when it has no ``head``, and HTTP defines HEAD as GET without the body, so
    a decorated ``get`` runs once for a key, whichever of the two came first."""
    method = request.method or "POST"
    return "GET" if method == "HEAD" else method


def _endpoint(request: HttpRequest) -> str:
    return f"{_method(request)} {_route(request)}"

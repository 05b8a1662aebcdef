"""DRF integration: ``@idempotent(...)`` on an APIView handler puts it behind the engine.

::

    class OrderListCreateView(APIView):
        @idempotent(required=True, fields=("items", "payment_method", "coupon_code", "note"))
        def post(self, request): ...

The handler runs inside the engine's transaction; ``request.idempotency`` (a
:class:`~idempotency.keys.ScopedKey`, or None when the request is not idempotent) gives it the
``business_key`` to store under a business table's own unique constraint.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import wraps
from typing import Any, Literal

from django.db import IntegrityError
from django.http import HttpResponse
from django.utils.module_loading import import_string
from rest_framework.request import Request
from rest_framework.views import APIView

from idempotency import engine, responses
from idempotency.conf import Policy, engine_setting
from idempotency.error_codes import IdempotencyErrorCode
from idempotency.fingerprint import FINGERPRINT_VERSION, all_fingerprints, field_hashes
from idempotency.keys import InvalidKey, ScopedKey, automatic_key, validate_key

Handler = Callable[..., HttpResponse]
KEY_HEADER = "HTTP_IDEMPOTENCY_KEY"


def idempotent(
    *,
    required: bool = False,
    fields: Sequence[str] | None = None,
    ttl_seconds: int | None = None,
    auto_key_window: int | None = None,
    in_flight: Literal["reject", "wait"] = "reject",
    wait_seconds: float = 2.0,
) -> Callable[[Handler], Handler]:
    """Make a DRF handler idempotent; see :class:`idempotency.conf.Policy` for the options."""
    policy = Policy(
        required=required,
        fields=tuple(fields) if fields is not None else None,
        ttl_seconds=ttl_seconds,
        auto_key_window=auto_key_window,
        in_flight=in_flight,
        wait_seconds=wait_seconds,
    )

    def decorate(handler: Handler) -> Handler:
        @wraps(handler)
        def wrapper(view: APIView, request: Request, *args: Any, **kwargs: Any) -> HttpResponse:
            return _handle(view, request, policy, handler, args, kwargs)

        wrapper.idempotency_policy = policy  # type: ignore[attr-defined]
        return wrapper

    return decorate


def _handle(
    view: APIView,
    request: Request,
    policy: Policy,
    handler: Handler,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> HttpResponse:
    request.idempotency = None
    identity = import_string(engine_setting("SCOPE_RESOLVER"))(request)
    if identity is None:
        return handler(view, request, *args, **kwargs)
    tenant, principal = identity
    payload = _payload(request.data, policy.fields, kwargs)  # ParseError -> 400 INVALID_JSON
    fingerprints = all_fingerprints(payload, None)
    raw_key = request.META.get(KEY_HEADER)
    if raw_key is not None:
        try:
            key = validate_key(raw_key)
        except InvalidKey as exc:
            return responses.problem(400, IdempotencyErrorCode.KEY_INVALID, str(exc))
    elif policy.auto_key_window:
        key = automatic_key(fingerprints[FINGERPRINT_VERSION])
    elif policy.required:
        return responses.problem(
            400,
            IdempotencyErrorCode.KEY_MISSING,
            "This endpoint requires an Idempotency-Key header",
        )
    else:
        return handler(view, request, *args, **kwargs)
    route = request.resolver_match.route if request.resolver_match else request.path
    scoped = ScopedKey(
        tenant=tenant,
        principal=principal,
        method=request.method,
        route=route,
        key=key,
        buckets=engine_setting("HOT_TENANT_BUCKETS").get(tenant, 1),
    )
    request.idempotency = scoped
    req = engine.IdempotentRequest(
        scoped=scoped,
        fingerprints=fingerprints,
        field_hashes=field_hashes(payload, None),
        policy=policy,
        endpoint=f"{request.method} {route}",
        request_meta=_meta(request),
    )
    return engine.process(req, lambda: _run_view(view, request, handler, args, kwargs))


def _payload(data: Any, fields: tuple[str, ...] | None, path: dict[str, Any]) -> dict[str, Any]:
    """The business payload: the declared body fields plus the path parameters."""
    body = dict(data) if hasattr(data, "keys") else {"body": data}
    if fields is not None:
        body = {name: body.get(name) for name in fields}
    body["path"] = {name: str(value) for name, value in path.items()}
    return body


def _run_view(
    view: APIView, request: Request, handler: Handler, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> HttpResponse:
    """Run the handler and render its answer (errors included) inside the transaction, so the
    engine can store the exact bytes. Unexpected exceptions propagate (and become a 500)."""
    try:
        response = handler(view, request, *args, **kwargs)
    except IntegrityError:
        raise
    except Exception as exc:
        response = view.handle_exception(exc)
    response = view.finalize_response(request, response, *args, **kwargs)
    if hasattr(response, "render"):
        response.render()
    return response


def _meta(request: Request) -> dict[str, str]:
    meta = request.META
    return {
        "remote_addr": meta.get("REMOTE_ADDR", ""),
        "user_agent": meta.get("HTTP_USER_AGENT", "")[:200],
        "request_id": meta.get("HTTP_X_REQUEST_ID", "")[:100],
    }

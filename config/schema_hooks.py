"""drf-spectacular postprocessing: the refusals every operation of the API can answer (below),
the codes and members of the error shape (:func:`declare_problem_members`), the top-level
nulls every JSON body admits (:func:`declare_null_as_left_out`), and the
defaults of fields that admit blank text put where the document stays valid
(:func:`lift_defaults_out_of_blank_alternatives`).

Seven of the README's documented errors come from no view, so no view's ``@extend_schema`` named
them, and the schema declared them on some operations or none while the server answered them on
all:

- 400 ``BAD_REQUEST``: Django's host check refuses a ``Host`` this site does not serve (and
  ``config/request_limits.py`` a chunked body it cannot decode) before any view, on every
  operation; one that declares a 400 of its own (a field's ``VALIDATION_ERROR``) keeps that
  description;
- 403 ``HTTPS_REQUIRED``: ``config/api_https.py`` refuses an ``/api/v1/`` request over plain
  HTTP (production, ``SECURE_SSL_REDIRECT``) before any view, on every operation: the payment
  callback, which names no 403 of its own, did not declare it; one that does (a credential's
  ``PERMISSION_DENIED``) keeps that description;
- 406 ``NOT_ACCEPTABLE``: DRF negotiates the answer's media type before it authenticates or
  runs the view, so an ``Accept`` naming no JSON type is refused on every operation, with or
  without credentials;
- 411 ``LENGTH_REQUIRED``: ``config/request_limits.py`` refuses a chunked body that the
  development server (the demo's) would hand to the view as no body, on every operation;
- 413 ``REQUEST_TOO_LARGE``: ``config/request_limits.py`` refuses a body over
  ``MAX_REQUEST_BYTES`` from its headers, before any view, on every path and method (sign-out,
  refresh and a diner's revocation, which read no body, included, and a GET sent with a body);
- 415 ``UNSUPPORTED_MEDIA_TYPE``: ``config/json_bodies.py`` refuses a write's body that is not
  JSON before any view, on every operation (those three included);
- 503 ``DATABASE_UNAVAILABLE``: every operation reads PostgreSQL (its credential, at least),
  and ``config/database_unavailable.py`` answers it while the database cannot be reached. An
  operation that declares a 503 of its own keeps that description; ``Retry-After`` is declared
  on each by ``idempotency.web.openapi.declare_retry_after``, which runs after this hook.

A client generated from the schema (or schemathesis's ``status_code_conformance``) took these
answers for undocumented ones. This hook adds them where a view did not, as the shared
problem+json shape.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

from config.error_codes import api_error_codes
from ordering.models.orders import DINER, MERCHANT, PROVIDER, SAGA

PROBLEM_CONTENT = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
EVERY_OPERATION = {
    "400": "Refused at the HTTP level before any API code ran (BAD_REQUEST): e.g. a Host header "
    "this site does not serve",
    "403": "Refused over plain HTTP (HTTPS_REQUIRED): the API answers over HTTPS only",
    "406": "No media type the API answers in is acceptable (it answers JSON)",
    "411": "A chunked body sent to a server that reads bodies by their Content-Length only "
    "(LENGTH_REQUIRED): Django's development server, never gunicorn",
    "413": "Request body too large (REQUEST_TOO_LARGE)",
    "503": "Temporarily unavailable (Retry-After): e.g. the database cannot be reached "
    "(DATABASE_UNAVAILABLE); nothing was done or kept, retry with the same key",
}
EVERY_BODY = {
    "415": "The body is not JSON (UNSUPPORTED_MEDIA_TYPE): request bodies are JSON only",
}
BODY_METHODS = frozenset({"post", "put", "patch"})


def declare_refusals_of_every_operation(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    for operations in result.get("paths", {}).values():
        for method, operation in operations.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue  # a path item's own "parameters", "summary", …
            responses = operation["responses"]
            refusals = {**EVERY_OPERATION, **(EVERY_BODY if method in BODY_METHODS else {})}
            for status, description in refusals.items():
                responses.setdefault(
                    status, {"content": deepcopy(PROBLEM_CONTENT), "description": description}
                )
            operation["responses"] = dict(sorted(responses.items()))
    return result


def declare_www_authenticate(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Every 401 of the API carries ``WWW-Authenticate`` naming the schemes the endpoint takes
    (``Api-Key``, ``Bearer``; the payment callback its signature header), as HTTP requires of
    a 401, so the schema says so on each: a client generated from it could not read the
    header it is told to follow."""
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict):
                continue
            refused = operation.get("responses", {}).get("401")
            if refused is not None:
                refused.setdefault("headers", {}).setdefault(
                    "WWW-Authenticate",
                    {
                        "schema": {"type": "string"},
                        "required": True,
                        "description": "The authentication schemes this endpoint takes, "
                        "e.g. `Api-Key, Bearer`.",
                    },
                )
    return result


def declare_accept_encoding(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """A body sent in a content coding is refused 415 with ``Accept-Encoding: identity``, the
    one coding the API reads (``config/json_bodies.py``, RFC 9110 12.5.3), so each 415 of the
    schema declares the header; a 415 for a body that is not JSON, or not UTF-8, carries none."""
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict):
                continue
            refused = operation.get("responses", {}).get("415")
            if refused is not None:
                refused.setdefault("headers", {}).setdefault(
                    "Accept-Encoding",
                    {
                        "schema": {"type": "string", "enum": ["identity"]},
                        "description": "On a body sent in a content coding: the one the API "
                        "reads (send the body uncompressed).",
                    },
                )
    return result


def declare_null_as_left_out(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Each optional top-level member of a JSON request body admits ``null``.

    ``config/parsers.py`` reads a top-level member whose value is ``null`` as left out (as the
    idempotency fingerprint does), so ``{"count": null}`` issues one token and
    ``{"diner_id": null}`` opens a guest session. The schema declared those members
    non-nullable: a client or validator generated from it (schemathesis's
    ``negative_data_rejection``) took the server's 201 for a request it should have refused.
    A required member stays non-nullable: null leaves it out, which is refused. Members of
    nested objects are read as sent (``"contact": {"phone": null}`` is refused) and keep their
    declaration.
    """
    schemas = result.get("components", {}).get("schemas", {})
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict):
                continue
            content = operation.get("requestBody", {}).get("content", {})
            body = content.get("application/json", {}).get("schema", {})
            ref = body.get("$ref", "")
            target = schemas.get(ref.rsplit("/", 1)[-1]) if ref else body
            if target:
                _admit_null_where_optional(target)
    return result


def _admit_null_where_optional(body: dict[str, Any]) -> None:
    required = set(body.get("required", ()))
    properties = body.get("properties", {})
    for name, member in properties.items():
        if name in required or member.get("nullable"):
            continue
        if "$ref" in member:  # OpenAPI 3.0 ignores a $ref's siblings: wrap it to add one
            properties[name] = {"allOf": [member], "nullable": True}
        else:
            member["nullable"] = True


def lift_defaults_out_of_blank_alternatives(
    result: dict[str, Any], **kwargs: Any
) -> dict[str, Any]:
    """A field that admits blank text besides its pattern declares its default where the blank
    alternative can admit it.

    drf-spectacular writes such a field (the contact's ``phone``: a pattern, or ``""``) as
    ``oneOf: [pattern, {"maxLength": 0}]`` and leaves its ``default`` in the first branch, where
    the pattern refuses it: ``""`` declared next to a pattern that needs 3 characters. The
    document was then no valid OpenAPI: openapi-spec-validator and openapi-core, which an app
    uses to check the API's answers, refused to load it. On the ``oneOf`` itself the default
    means the same to a client, and ``""`` is one of its alternatives.
    """
    _lift_defaults(result)
    return result


def _lift_defaults(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _lift_defaults(item)
        return
    if not isinstance(node, dict):
        return
    for branch in node.get("oneOf", ()):
        if isinstance(branch, dict) and "default" in branch:
            node.setdefault("default", branch.pop("default"))
    for value in node.values():
        _lift_defaults(value)


NULL_ONLY = {"nullable": True, "enum": [None]}


def admit_null_beside_nullable_references(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """A nullable member that names another schema (an order's ``payment``, the ``contact`` of
    an order being placed) admits ``null`` in the form OpenAPI 3.0.3 reads.

    drf-spectacular (and :func:`declare_null_as_left_out`) write it as ``allOf: [$ref]`` with
    ``nullable: true`` beside it. OpenAPI 3.0.3 says ``nullable`` counts only beside a ``type``
    in the same schema object, and ``null`` is no object for the referenced schema, so a
    validator that follows it (openapi-core) refused every order not paid yet
    (``"payment": null``). ``oneOf`` the referenced schema or one that admits ``null`` alone
    says what was meant in a form 3.0.3 reads so, and a generated type stays ``Payment | null``.
    """
    _admit_null_beside_references(result)
    return result


def _admit_null_beside_references(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _admit_null_beside_references(item)
        return
    if not isinstance(node, dict):
        return
    references = node.get("allOf") or []
    one_reference = len(references) == 1 and set(references[0]) == {"$ref"}
    if one_reference and node.get("nullable") is True and "type" not in node:
        del node["allOf"], node["nullable"]
        node["oneOf"] = [references[0], deepcopy(NULL_ONLY)]
    for value in node.values():
        _admit_null_beside_references(value)


ORDER_STATUS = {"$ref": "#/components/schemas/OrderStatusEnum"}
# The members an error answer of the API carries beside code, detail, status and errors,
# with the codes that carry each (ordering/services, ordering/api, config/request_limits.py,
# idempotency/web/api.py).
PROBLEM_MEMBERS: dict[str, dict[str, Any]] = {
    "dish_id": {
        "type": "integer",
        "description": "INSUFFICIENT_STOCK, QUANTITY_INVALID: the dish refused",
    },
    "dish_ids": {
        "type": "array",
        "items": {"type": "integer"},
        "description": "DISH_NOT_FOUND, DISH_UNAVAILABLE: the dishes refused",
    },
    "limit": {
        "oneOf": [{"type": "integer"}, {"type": "string", "format": "decimal"}],
        "description": "The bound that refused: REQUEST_TOO_LARGE, bytes; "
        "IDEMPOTENCY_TOKEN_QUOTA_EXCEEDED, tokens outstanding; ORDER_TOTAL_TOO_LARGE, the "
        "largest amount, a decimal string",
    },
    "scope": {
        "type": "string",
        # tenant_share: a guest held to API_GUEST_CEILING_SHARE of the quota (the engine's
        # TOKEN_QUOTA_SHARE, idempotency/scripts/lua/issue_tokens.lua)
        "enum": ["tenant", "principal", "tenant_share"],
        "description": "IDEMPOTENCY_TOKEN_QUOTA_EXCEEDED: whose quota refused, the tenant's, "
        "the caller's share, or the guests' share of the tenant's (tenant_share)",
    },
    "order_id": {
        "type": "string",
        "description": "ORDER_ALREADY_PLACED: the order this key placed; "
        "ORDER_STATUS_CONFLICT: the order refused",
    },
    "order_status": {
        "allOf": [ORDER_STATUS],
        "description": "ORDER_STATUS_CONFLICT: the order's status now",
    },
}


# What a VALIDATION_ERROR's ``errors`` holds (DRF's ValidationError detail, as
# config/api_errors.py answers it): an object whose members are fields, or the indexes of a
# list's elements that were refused ("0", "1"; items, tokens), each holding the messages of
# that field or the errors of the object or list inside it (contact, an item); a body that is
# no object is ``{"non_field_errors": [...]}``.
FIELD_ERRORS: dict[str, Any] = {
    "type": "object",
    "description": "VALIDATION_ERROR: each refused field (or list element, by index) with "
    "its messages, or the errors of the object or list it holds",
    "additionalProperties": {
        "oneOf": [
            {"type": "array", "items": {"type": "string"}, "minItems": 1},
            {"$ref": "#/components/schemas/FieldErrors"},
        ]
    },
    "minProperties": 1,
}


def declare_problem_members(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """The error shape declares its codes and every member the API's errors carry.

    The engine's ``Problem`` (``idempotency.web.openapi``) knows only ``code``, ``detail``,
    ``status`` and ``errors``, with ``code`` any string: a client generated from the schema had
    no type for a stock refusal's ``dish_id``, a conflict's ``allowed_moves`` or a quota's
    ``scope``, no shape for a validation error's ``errors`` (``FieldErrors``), and no list
    of the codes to switch on. The codes are those the registries
    declare (:func:`config.error_codes.api_error_codes`), as the component ``ProblemCode``;
    the members are optional, each carried by the codes its description names.
    """
    schemas = result.get("components", {}).get("schemas", {})
    problem = schemas.get("Problem")
    if problem is None:
        return result
    schemas["ProblemCode"] = {
        "type": "string",
        "enum": api_error_codes(),
        "description": "The machine-readable code of an error (README, API errors)",
    }
    move = {
        "type": "object",
        "properties": {
            "to": ORDER_STATUS,
            "by": {
                "type": "array",
                "items": {"type": "string", "enum": [DINER, MERCHANT, PROVIDER, SAGA]},
            },
        },
        "required": ["to", "by"],
    }
    allowed_moves = {
        "type": "array",
        "items": move,
        "description": "ORDER_STATUS_CONFLICT: the moves the order allows now, and who may "
        "make each",
    }
    # the engine's ``errors`` is any JSON value: a generated client typed it ``unknown``
    schemas["FieldErrors"] = deepcopy(FIELD_ERRORS)
    problem["properties"].update(
        code={"$ref": "#/components/schemas/ProblemCode"},
        errors={
            "allOf": [{"$ref": "#/components/schemas/FieldErrors"}],
            "description": "Field errors, on invalid input (VALIDATION_ERROR)",
        },
        **deepcopy(PROBLEM_MEMBERS),
        allowed_moves=allowed_moves,
    )
    return result

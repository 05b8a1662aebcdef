"""Contract of the ordering REST API: status codes, error codes, shapes, tenant isolation."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from urllib.parse import urlencode

import jsonschema_rs
import pytest
from django.conf import settings
from openapi_schema_validator import OAS30ReadValidator
from openapi_spec_validator import validate as validate_openapi_document
from rest_framework.test import APIClient

from ordering.api.views import OrderListCreateView
from ordering.models import Dish, Order, OrderStatus
from ordering.services.placing import MAX_LINES, PAYMENT_METHODS
from tenants.api_keys import issue_api_key
from tenants.models import ApiClient
from tests.conftest import api_for, diner_token, menu_for
from tests.support.django_child import run_with_environment

pytestmark = pytest.mark.django_db


def place(api, menu, **overrides):
    body = {"items": [{"dish_id": menu["pizza"].pk, "quantity": 2}], "payment_method": "card"}
    body.update(overrides)
    return post_new(api, body, format="json")


def post_new(api, body, **kwargs):
    """POST /orders/ with a fresh Idempotency-Key."""
    return api.post("/api/v1/orders/", body, HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex, **kwargs)


def assert_error(response, status, code):
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["code"] == code and body["status"] == status and body["detail"]
    return body


def test_menu_lists_active_dishes(api, menu, tenant):
    Dish.objects.for_tenant(tenant).filter(pk=menu["pasta"].pk).update(active=False)
    r = api.get("/api/v1/menu/")
    assert r.status_code == 200
    assert [(d["name"], d["price"], d["available"]) for d in r.json()] == [("Pizza", "9.50", True)]


def test_place_order_201_with_location_and_string_id(api, menu):
    r = place(api, menu, note="no onions")
    assert r.status_code == 201
    body = r.json()
    assert isinstance(body["id"], str) and body["id"].isdigit()
    assert r["Location"] == f"/api/v1/orders/{body['id']}/"
    assert (body["status"], body["total"], body["note"], body["diner_id"]) == (
        "CREATED",
        "19.00",
        "no onions",
        "diner-1",
    )
    assert [t["to_status"] for t in body["transitions"]] == ["CREATED"]
    assert (body["number"], body["number_label"]) == (1, "#0001")  # the day's first order
    assert body["business_day"] == str(Order.all_tenants.get(pk=body["id"]).business_day)


def test_get_list_filter_and_paginate(api, menu):
    ids = [
        place(api, menu, items=[{"dish_id": menu["pizza"].pk, "quantity": 1}]).json()["id"]
        for _ in range(3)
    ]
    api.post(f"/api/v1/orders/{ids[0]}/pay/")
    assert api.get(f"/api/v1/orders/{ids[1]}/").json()["id"] == ids[1]
    listing = api.get("/api/v1/orders/").json()
    assert [o["id"] for o in listing["results"]] == ids[::-1]
    paying = api.get("/api/v1/orders/?status=PAYING").json()
    assert [o["id"] for o in paying["results"]] == [ids[0]]
    assert_error(api.get("/api/v1/orders/?status=NOPE"), 400, "VALIDATION_ERROR")
    # a filter or page given twice is refused, not read as one of them (red: 200 with the
    # CANCELLED orders only, read as the whole answer to both statuses)
    for query in ("status=PAYING&status=CANCELLED", "cursor=YS4xLjE&cursor=YS4yLjI"):
        body = assert_error(api.get(f"/api/v1/orders/?{query}"), 400, "VALIDATION_ERROR")
        assert body["detail"] == f"{query.split('=')[0]} may be given once"


def test_pay_then_cancel_flow(api, merchant_api, menu):
    order_id = place(api, menu).json()["id"]
    paid = api.post(f"/api/v1/orders/{order_id}/pay/")
    assert paid.status_code == 200
    payment = paid.json()["payment"]
    assert paid.json()["status"] == "PAYING" and "provider_txn_id" not in payment
    assert payment["amount"] == "19.00" and payment["status"] == "pending"
    merchant_view = merchant_api.get(f"/api/v1/orders/{order_id}/").json()["payment"]
    assert merchant_view["provider_txn_id"].startswith("sim_")
    # a second, deliberate attempt (its own key) really runs, and is refused
    again = api.post(f"/api/v1/orders/{order_id}/pay/", HTTP_IDEMPOTENCY_KEY="second-pay")
    body = assert_error(again, 409, "ORDER_STATUS_CONFLICT")
    assert body["order_status"] == "PAYING"
    cancelled = api.post(f"/api/v1/orders/{order_id}/cancel/")
    assert cancelled.json()["status"] == "CANCELLED"
    assert_error(
        api.post(f"/api/v1/orders/{order_id}/cancel/", HTTP_IDEMPOTENCY_KEY="again"),
        409,
        "ORDER_STATUS_CONFLICT",
    )


def test_merchant_transition(api, merchant_api, menu):
    order_id = place(api, menu).json()["id"]
    Order.all_tenants.filter(pk=order_id).update(status=OrderStatus.PAID)
    r = merchant_api.post(
        f"/api/v1/orders/{order_id}/transition/", {"to": "ACCEPTED"}, format="json"
    )
    assert r.status_code == 200 and r.json()["status"] == "ACCEPTED"
    assert_error(
        merchant_api.post(
            f"/api/v1/orders/{order_id}/transition/", {"to": "COMPLETED"}, format="json"
        ),
        409,
        "ORDER_STATUS_CONFLICT",
    )
    assert_error(
        merchant_api.post(f"/api/v1/orders/{order_id}/transition/", {"to": "PAID"}, format="json"),
        400,
        "VALIDATION_ERROR",
    )
    # a diner app may not move orders through the kitchen
    assert_error(
        api.post(f"/api/v1/orders/{order_id}/transition/", {"to": "PREPARING"}, format="json"),
        403,
        "PERMISSION_DENIED",
    )


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        pytest.param(
            {"items": [], "payment_method": "card"}, 400, "VALIDATION_ERROR", id="no-items"
        ),
        pytest.param({"payment_method": "card"}, 400, "VALIDATION_ERROR", id="items-missing"),
        pytest.param(
            {"items": "pizza", "payment_method": "card"},
            400,
            "VALIDATION_ERROR",
            id="items-wrong-type",
        ),
        pytest.param(
            {"items": [{"dish_id": 1, "quantity": 0}], "payment_method": "card"},
            400,
            "VALIDATION_ERROR",
            id="quantity-zero",
        ),
        pytest.param(
            {"items": [{"dish_id": 1, "quantity": -3}], "payment_method": "card"},
            400,
            "VALIDATION_ERROR",
            id="quantity-negative",
        ),
        pytest.param(
            {"items": [{"dish_id": "PIZZA", "quantity": 101}], "payment_method": "card"},
            400,
            "QUANTITY_INVALID",
            id="quantity-101",
        ),
        pytest.param(
            {"items": [{"dish_id": 1, "quantity": 10**9}], "payment_method": "card"},
            400,
            "QUANTITY_INVALID",
            id="quantity-absurd",
        ),
        pytest.param(
            {"items": [{"dish_id": 1, "quantity": 1}], "payment_method": "gold"},
            400,
            "VALIDATION_ERROR",
            id="bad-method",
        ),
        pytest.param(
            {"items": [{"dish_id": 10**20, "quantity": 1}], "payment_method": "card"},
            400,
            "VALIDATION_ERROR",
            id="dish-id-overflow",
        ),
        pytest.param(
            {"items": [{"dish_id": 424242, "quantity": 1}], "payment_method": "card"},
            422,
            "DISH_NOT_FOUND",
            id="unknown-dish",
        ),
        pytest.param(
            {"items": [{"dish_id": "PIZZA", "quantity": 99}], "payment_method": "card"},
            409,
            "INSUFFICIENT_STOCK",
            id="no-stock",
        ),
        pytest.param(
            {
                "items": [{"dish_id": "PIZZA", "quantity": 1}],
                "payment_method": "card",
                "coupon_code": "NOPE",
            },
            422,
            "COUPON_INVALID",
            id="bad-coupon",
        ),
        pytest.param(
            {
                "items": [{"dish_id": "PIZZA", "quantity": 1}],
                "payment_method": "card",
                "note": "x" * 501,
            },
            400,
            "VALIDATION_ERROR",
            id="note-too-long",
        ),
    ],
)
def test_place_order_errors_write_nothing(api, tenant, body, status, code):
    menu = menu_for(tenant, stock=10)
    for item in body.get("items", []) if isinstance(body.get("items"), list) else []:
        if item["dish_id"] == "PIZZA":
            item["dish_id"] = menu["pizza"].pk
    error = assert_error(post_new(api, body, format="json"), status, code)
    if code == "VALIDATION_ERROR":
        assert error["errors"]
    assert Order.all_tenants.count() == 0
    assert set(Dish.all_tenants.values_list("stock", flat=True)) == {10}


def test_invalid_json_is_400(api):
    r = post_new(api, "{not json", content_type="application/json")
    assert_error(r, 400, "INVALID_JSON")


@pytest.mark.parametrize(
    "template",
    [
        '{{"items": [{pizza}], "items": [{pasta}], "payment_method": "card"}}',
        '{{"items": [{pasta}], "payment_method": "card", "payment_method": "cash"}}',
        '{{"items": [{{"dish_id": {pasta_id}, "quantity": 1, "quantity": 9}}], '
        '"payment_method": "card"}}',
    ],
    ids=["items-twice", "payment-method-twice", "quantity-twice-in-a-line"],
)
def test_a_body_naming_a_member_twice_is_400_and_places_nothing(api, menu, template):
    # json kept the last of the two silently (the first list of items was dropped and an order
    # of the second placed), where a gateway or the client's own log may read the first; names
    # that collide only once normalised were already refused as ambiguous.
    line = '{{"dish_id": {}, "quantity": 1}}'
    body = template.format(
        pizza=line.format(menu["pizza"].pk),
        pasta=line.format(menu["pasta"].pk),
        pasta_id=menu["pasta"].pk,
    )
    body_json = assert_error(
        post_new(api, body, content_type="application/json"), 400, "INVALID_JSON"
    )
    assert "twice" in body_json["detail"]
    assert Order.all_tenants.count() == 0


def test_unknown_order_is_404(api):
    assert_error(api.get("/api/v1/orders/123/"), 404, "ORDER_NOT_FOUND")
    assert_error(api.post("/api/v1/orders/99999999999999999999/pay/"), 404, "ORDER_NOT_FOUND")


def test_authentication_errors(client, tenant, menu):
    assert_error(client.get("/api/v1/menu/"), 401, "API_KEY_MISSING")
    assert_error(client.get("/api/v1/menu/", HTTP_AUTHORIZATION="Bearer x"), 401, "SESSION_INVALID")
    assert_error(client.get("/api/v1/menu/", HTTP_AUTHORIZATION="Basic x"), 401, "API_KEY_INVALID")
    assert_error(
        client.get("/api/v1/menu/", HTTP_AUTHORIZATION="Api-Key abc.def"), 401, "API_KEY_INVALID"
    )


def test_the_scheme_s_name_is_case_insensitive(tenant, menu):
    # RFC 9110: "bearer" and "API-KEY" name the same schemes as "Bearer" and "Api-Key"
    token = diner_token(tenant, "diner-1")
    _, key = issue_api_key(tenant=tenant, name="app", kind=ApiClient.Kind.PUBLISHABLE)
    for header in (f"bearer {token}", f"BEARER {token}", f"api-key {key}", f"API-KEY {key}"):
        answer = APIClient().get("/api/v1/menu/", HTTP_AUTHORIZATION=header)
        assert answer.status_code == 200, (header, answer.content)


def test_suspended_tenant_is_403(api, tenant, menu):
    tenant.status = tenant.Status.SUSPENDED
    tenant.save()
    assert_error(api.get("/api/v1/menu/"), 403, "TENANT_SUSPENDED")


def test_tenant_isolation(api, tenant, other_tenant, menu):
    # given an order of tenant A
    order_id = place(api, menu).json()["id"]
    other_menu = menu_for(other_tenant)
    other = api_for(other_tenant, kind="merchant")
    other_diner = api_for(other_tenant, diner="diner-1")  # even the same diner id
    # then tenant B's credentials cannot read or change it: always 404, nothing changes
    assert_error(other.get(f"/api/v1/orders/{order_id}/"), 404, "ORDER_NOT_FOUND")
    assert_error(other_diner.get(f"/api/v1/orders/{order_id}/"), 404, "ORDER_NOT_FOUND")
    for action in ("pay", "cancel"):
        assert_error(
            other_diner.post(f"/api/v1/orders/{order_id}/{action}/"), 404, "ORDER_NOT_FOUND"
        )
    assert_error(
        other.post(f"/api/v1/orders/{order_id}/transition/", {"to": "CANCELLED"}, format="json"),
        404,
        "ORDER_NOT_FOUND",
    )
    assert other.get("/api/v1/orders/").json()["results"] == []
    assert [d["name"] for d in other.get("/api/v1/menu/").json()] == ["Pasta", "Pizza"]
    assert {d["id"] for d in other.get("/api/v1/menu/").json()} == {
        d.pk for d in other_menu.values()
    }
    # and B's diners cannot order A's dishes
    assert_error(place(other_diner, menu), 422, "DISH_NOT_FOUND")
    assert Order.objects.for_tenant(tenant).get(pk=order_id).status == "CREATED"


def test_diner_sees_only_own_orders(api, tenant, menu):
    order_id = place(api, menu).json()["id"]
    someone_else = api_for(tenant, diner="diner-2")
    assert_error(someone_else.get(f"/api/v1/orders/{order_id}/"), 404, "ORDER_NOT_FOUND")
    assert_error(someone_else.post(f"/api/v1/orders/{order_id}/cancel/"), 404, "ORDER_NOT_FOUND")
    assert someone_else.get("/api/v1/orders/").json()["results"] == []


def test_schema_and_docs_are_served(client):
    schema = client.get("/api/schema/")
    assert schema.status_code == 200 and b"/api/v1/orders/" in schema.content
    assert client.get("/api/docs/").status_code == 200


def test_the_schema_is_a_valid_openapi_document(client):
    # an app's validator or code generator loads the served schema as it is: openapi-core and
    # openapi-spec-validator refused it, as the contact's phone declared a default ("") that its
    # own pattern refuses
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    validate_openapi_document(schema)
    phone = schema["components"]["schemas"]["ContactIn"]["properties"]["phone"]
    assert phone["default"] == ""  # a blank phone is still what a left-out one means


def test_an_order_not_paid_yet_conforms_to_the_schema_s_order(client, api, menu):
    # "payment": null was declared as allOf [Payment] with nullable beside it, which OpenAPI
    # 3.0.3 does not read as admitting null (nullable needs a type in the same schema object):
    # openapi-core refused every answer with an order not paid yet
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    created = place(api, menu)
    assert created.status_code == 201 and created.json()["payment"] is None
    listed = api.get("/api/v1/orders/")
    answers = {
        ("/api/v1/orders/", "post", "201"): created.json(),
        ("/api/v1/orders/{order_id}/", "get", "200"): api.get(created["Location"]).json(),
        ("/api/v1/orders/", "get", "200"): listed.json(),
    }
    for (path, method, status), body in answers.items():
        declared = schema["paths"][path][method]["responses"][status]["content"]
        validator = OAS30ReadValidator({**schema, **declared["application/json"]["schema"]})
        assert [error.message for error in validator.iter_errors(body)] == [], (path, method)
    paid = {"provider": "simulated", "method": "card", "amount": "1.00", "currency": "EUR"}
    order = OAS30ReadValidator({**schema, "$ref": "#/components/schemas/Order"})
    assert order.is_valid({**created.json(), "payment": {**paid, "status": "pending"}})
    assert not order.is_valid({**created.json(), "payment": {**paid, "status": 1}})
    assert not order.is_valid({**created.json(), "payment": "pending"})


@pytest.mark.parametrize("method", PAYMENT_METHODS)
def test_the_schema_names_the_payment_methods_an_order_and_its_payment_answer(
    client, api, menu, method
):
    # a request names one of the methods (PaymentMethodEnum) and the answer repeats it, but
    # the order's payment_method and its payment's method were declared as any string: a
    # client generated from the schema could not switch on what it had sent
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    created = place(api, menu, payment_method=method).json()
    paid = api.post(f"/api/v1/orders/{created['id']}/pay/", HTTP_IDEMPOTENCY_KEY="pay").json()
    assert (paid["payment_method"], paid["payment"]["method"]) == (method, method)

    def enum_of(declared):
        ref = declared.get("$ref") or declared.get("allOf", [{}])[0].get("$ref")
        return schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]["enum"] if ref else None

    properties = schema["components"]["schemas"]
    assert enum_of(properties["Order"]["properties"]["payment_method"]) == list(PAYMENT_METHODS)
    assert enum_of(properties["Payment"]["properties"]["method"]) == list(PAYMENT_METHODS)


def test_the_schema_bounds_an_order_s_items_as_the_server_does(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    items = schema["components"]["schemas"]["PlaceOrderIn"]["properties"]["items"]
    assert (items["minItems"], items["maxItems"]) == (1, MAX_LINES)
    # a list that is not an input keeps no bound it does not have
    lines = schema["components"]["schemas"]["Order"]["properties"]["lines"]
    assert lines["type"] == "array" and "minItems" not in lines and "maxItems" not in lines


def test_the_docs_name_the_fields_that_make_an_order_the_same_payload():
    # docs/idempotency.md named four of the five: a new contact with the same key is a 422
    policy = OrderListCreateView.post.idempotency_policy
    docs = (Path(settings.BASE_DIR) / "docs" / "idempotency.md").read_text()
    sentence = re.search(r"For `POST /api/v1/orders/` the fields are (.+?)\. ", docs, re.S)
    assert sentence, "the sentence naming the fields is gone"
    named = re.findall(r"`([a-z_]+)`", sentence.group(1))
    assert named == list(policy.fields)


def test_the_schema_declares_the_key_s_bounds_and_the_answers_idempotency_headers(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    create = schema["paths"]["/api/v1/orders/"]["post"]
    [key] = [p for p in create["parameters"] if p["name"] == "Idempotency-Key"]
    assert key["required"] and key["schema"]["maxLength"] == 255
    # the pattern is the engine's rule: printable ASCII, no comma
    pattern = re.compile(key["schema"]["pattern"])
    assert pattern.match("order-1 ~!") and not pattern.match("a,b") and not pattern.match("é")
    # HTTP strips a header's outer spaces: a key of spaces is empty, " a" is "a"
    assert not any(pattern.match(k) for k in (" ", "   ", " abc", "abc "))
    created = create["responses"]["201"]
    assert set(created["headers"]) == {
        "X-Idempotent-Result",
        "Idempotent-Replayed",
        "Idempotency-Redacted",
        "Location",
    }
    assert created["headers"]["X-Idempotent-Result"]["schema"]["enum"][:2] == ["MISS", "HIT"]
    conflict = create["responses"]["409"]["headers"]
    assert {"Retry-After", "Location", "X-Idempotent-Result"} <= set(conflict)
    assert "IN_PROGRESS" in conflict["X-Idempotent-Result"]["schema"]["enum"]
    assert (
        "REUSED" in create["responses"]["422"]["headers"]["X-Idempotent-Result"]["schema"]["enum"]
    )
    # every 429 and 503 of the API says how long to wait
    waits = [
        answer
        for operations in schema["paths"].values()
        for operation in operations.values()
        for status, answer in operation["responses"].items()
        if status in ("429", "503")
    ]
    assert len(waits) >= 8 and all("Retry-After" in answer["headers"] for answer in waits)
    pay = schema["paths"]["/api/v1/orders/{order_id}/pay/"]["post"]
    assert "X-Idempotent-Result" in pay["responses"]["200"]["headers"]
    assert "API key missing" not in create["responses"]["401"]["description"]  # Bearer only


@pytest.mark.parametrize("key", ["auto:abc", "auto:", "autos:abc", "AUTO:abc", "k", "a b", "a,b"])
def test_the_schema_s_key_pattern_admits_exactly_the_keys_the_server_takes(client, api, menu, key):
    # "auto:" starts the engine's automatic keys, and a key sent with it is refused (400
    # IDEMPOTENCY_KEY_INVALID); the schema's pattern admitted it, so a client generated from
    # the schema (schemathesis's positive_data_acceptance) could send a key it called valid.
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    answer = api.post(
        "/api/v1/orders/",
        {"items": [{"dish_id": menu["pizza"].pk, "quantity": 1}], "payment_method": "card"},
        format="json",
        HTTP_IDEMPOTENCY_KEY=key,
    )
    refused = answer.status_code == 400 and answer.json()["code"] == "IDEMPOTENCY_KEY_INVALID"
    assert refused or answer.status_code == 201, answer.content
    for path in ("/api/v1/orders/", "/api/v1/orders/{order_id}/pay/"):
        [declared] = [
            parameter["schema"]
            for parameter in schema["paths"][path]["post"]["parameters"]
            if parameter["name"] == "Idempotency-Key"
        ]
        admitted = jsonschema_rs.validator_for(declared).is_valid(key)
        assert admitted != refused, (path, key, declared["pattern"])


def test_the_schema_declares_the_idempotency_headers_on_every_refusal_a_key_replays(
    client, api, menu, tenant
):
    # A refusal the view gave under a key is the key's answer (MISS, then replayed as HIT), and
    # the clients tell it from a refusal given before the engine by that header; the schema
    # declared it on 409 and 422 only, not on the 400 and 404 that carry it too.
    other = api_for(tenant, diner="diner-2")
    theirs = place(other, menu).json()["id"]
    too_many = {"items": [{"dish_id": menu["pizza"].pk, "quantity": 101}], "payment_method": "card"}
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()["paths"]
    refusals = [
        ("/api/v1/orders/", "/api/v1/orders/", too_many, 400),
        ("/api/v1/orders/{order_id}/pay/", f"/api/v1/orders/{theirs}/pay/", None, 404),
        ("/api/v1/orders/{order_id}/cancel/", f"/api/v1/orders/{theirs}/cancel/", None, 404),
    ]
    for route, path, body, status in refusals:
        key = uuid.uuid4().hex
        first, again = (
            api.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY=key) for _ in range(2)
        )
        assert (first.status_code, again.status_code) == (status, status), path
        assert (first["X-Idempotent-Result"], again["X-Idempotent-Result"]) == ("MISS", "HIT")
        declared = schema[route]["post"]["responses"][str(status)].get("headers", {})
        assert {"X-Idempotent-Result", "Idempotent-Replayed"} <= set(declared), (route, status)


def test_the_schema_s_location_header_admits_the_location_the_server_sends(client, api, menu):
    # The schema declared Location as format "uri" (absolute), while the server sends a path on
    # this site: every generated client or validator that checks formats (schemathesis's
    # response_headers_conformance did) called a correct 201 non-conforming.
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    create = schema["paths"]["/api/v1/orders/"]["post"]
    placed = place(api, menu)
    assert placed.status_code == 201
    for status in ("201", "409"):  # 409: ORDER_ALREADY_PLACED names the order the key placed
        declared = create["responses"][status]["headers"]["Location"]["schema"]
        validator = jsonschema_rs.validator_for(declared, validate_formats=True)
        assert validator.is_valid(placed["Location"]), (status, declared, placed["Location"])


def test_the_schema_declares_an_order_id_in_a_path_as_the_answers_write_it(client, api, menu):
    # An order id is past JavaScript's exact 2**53. The path parameter was declared an int64, so
    # the TypeScript types generated from the schema made it a `number`, which rounds it to
    # another id; the answers write it as a string of digits, and the path now declares those.
    placed = place(api, menu)
    order_id = placed.json()["id"]
    assert isinstance(order_id, str) and int(order_id) > 2**53
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    declared = {
        f"{method.upper()} {path}": parameter["schema"]
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        for parameter in operation.get("parameters", [])
        if parameter["name"] == "order_id"
    }
    assert len(declared) == 4, declared
    for operation, parameter in declared.items():
        assert parameter["type"] == "string", operation
        validator = jsonschema_rs.validator_for(parameter)
        assert validator.is_valid(order_id), operation
        for not_an_id in ("0", "-1", "1.5", "1e3", " 1", "12345678901234567890"):
            assert not validator.is_valid(not_an_id), (operation, not_an_id)
    assert api.get(f"/api/v1/orders/{order_id}/").json()["id"] == order_id


def as_json_schema(schema):
    """An OpenAPI 3.0 schema as JSON Schema reads it: ``nullable`` admits null."""
    if isinstance(schema, list):
        return [as_json_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    converted = {name: as_json_schema(value) for name, value in schema.items()}
    if converted.pop("nullable", False):
        return {"anyOf": [converted, {"type": "null"}]}
    return converted


def test_the_schema_requires_every_field_every_answer_carries(client, api, menu):
    # An order's status, currency, discount, note and diner were declared optional (their model
    # fields have defaults), so the TypeScript types made `order.status` possibly undefined
    # although every answer carries it. Only the merchant-only fields are optional.
    order_id = place(api, menu).json()["id"]
    assert api.post(f"/api/v1/orders/{order_id}/pay/").status_code == 200
    order = api.get(f"/api/v1/orders/{order_id}/").json()
    listed = api.get("/api/v1/orders/").json()["results"][0]
    dish = api.get("/api/v1/menu/").json()[0]
    schemas = as_json_schema(
        client.get("/api/schema/", HTTP_ACCEPT="application/json").json()["components"]
    )
    answers = {
        "OrderDetail": order,
        "Order": listed,
        "OrderLine": order["lines"][0],
        "Payment": order["payment"],
        "Transition": order["transitions"][0],
        "Dish": dish,
    }
    for name, answer in answers.items():
        schema = schemas["schemas"][name]
        conforms = jsonschema_rs.validator_for({**as_json_schema(schema), "components": schemas})
        assert conforms.is_valid(answer), (name, answer)
        assert set(answer) <= set(schema["required"]), (name, set(answer) - set(schema["required"]))
        optional = set(schema["properties"]) - set(schema["required"])
        assert optional <= {"provider_txn_id", "actor"}, (name, optional)


def test_the_schema_admits_null_where_the_server_reads_it_as_left_out(client, api, menu, tenant):
    # The JSON parser reads a top-level null as the member left out (config/parsers.py), so
    # {"count": null} issued a token and {"diner_id": null} opened a guest session, while the
    # schema declared both non-nullable: schemathesis's negative_data_rejection, and any client
    # that validates before sending, took a 201 for a request the server should have refused.
    document = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    schemas = as_json_schema(document["components"])

    def admits(name, body):
        schema = {**as_json_schema(document["components"]["schemas"][name]), "components": schemas}
        return jsonschema_rs.validator_for(schema).is_valid(body)

    pizza = [{"dish_id": menu["pizza"].pk, "quantity": 1}]
    optional_nulls = [
        ("IssueTokensIn", "/api/v1/idempotency-tokens/", api, {"count": None}, 201),
        ("OpenSessionIn", "/api/v1/diner-sessions/", api_for(tenant), {"diner_id": None}, 201),
        (
            "PlaceOrderIn",
            "/api/v1/orders/",
            api,
            {
                "items": pizza,
                "payment_method": "card",
                "note": None,
                "contact": None,
                "coupon_code": None,
            },
            201,
        ),
    ]
    for name, path, caller, body, status in optional_nulls:
        answer = caller.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex)
        assert answer.status_code == status, (path, answer.content)
        assert admits(name, body), name  # red: null was not an integer, a string, a ContactIn
    # a required member's null leaves it out, which is refused: the schema refuses it too
    required_null = {"items": None, "payment_method": "card"}
    assert_error(post_new(api, required_null, format="json"), 400, "VALIDATION_ERROR")
    assert not admits("PlaceOrderIn", required_null)
    # a nested member is read as sent: its null is refused, and declared so
    nested = {"items": pizza, "payment_method": "card", "contact": {"phone": None}}
    assert_error(post_new(api, nested, format="json"), 400, "VALIDATION_ERROR")
    assert not admits("PlaceOrderIn", nested)


def test_the_schema_offers_request_bodies_only_in_json(client, api):
    # Every body used to be offered as JSON, form-urlencoded and multipart. A form cannot hold an
    # order's items nor an integer (a form's values are strings, and no field converts one), and
    # the payment callback reads raw JSON: a generated client picking a form always failed. The
    # API takes JSON bodies only.
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    offered = {
        f"{method.upper()} {path}": sorted(operation["requestBody"]["content"])
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if isinstance(operation, dict) and "requestBody" in operation
    }
    assert len(offered) >= 6, offered
    assert all(types == ["application/json"] for types in offered.values()), offered
    # why: the same request is taken as JSON and refused as a form
    assert api.post("/api/v1/idempotency-tokens/", {"count": 2}, format="json").status_code == 201
    as_form = api.post("/api/v1/idempotency-tokens/", {"count": 2})
    assert_error(as_form, 415, "UNSUPPORTED_MEDIA_TYPE")


FORM = "application/x-www-form-urlencoded"
MULTIPART = "multipart/form-data; boundary=XyZ"


def multipart(**fields: str) -> bytes:
    parts = [
        f'--XyZ\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        for name, value in fields.items()
    ]
    return ("".join(parts) + "--XyZ--\r\n").encode()


@pytest.mark.parametrize("media_type", [FORM, MULTIPART], ids=["urlencoded", "multipart"])
def test_a_form_body_is_refused_as_415_and_its_key_stays_free(api, merchant_api, menu, media_type):
    """A form cannot carry an integer (``quantity``, ``count``: its values are strings) nor an
    order's items: forms were parsed all the same, and a form naming a number was a 400 about
    the number's type, one naming text only worked. Every body is JSON now; a form is refused
    before anything reads it, whatever it holds, and keeps nothing for its key."""
    fields = {"items": "1", "payment_method": "card"}
    raw = urlencode(fields) if media_type == FORM else multipart(**fields)
    # when an order is posted as a form
    refused = api.post("/api/v1/orders/", raw, content_type=media_type, HTTP_IDEMPOTENCY_KEY="k1")
    # then it is 415, naming the media type and JSON, and nothing is placed
    body = assert_error(refused, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert media_type.split(";")[0] in body["detail"] and "JSON only" in body["detail"]
    assert not Order.all_tenants.exists()
    # and the same key then places the order sent as JSON: the refusal was not its answer
    order = {"items": [{"dish_id": menu["pizza"].pk, "quantity": 2}], "payment_method": "card"}
    placed = api.post("/api/v1/orders/", order, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert placed.status_code == 201, placed.content
    # as are the other bodies sent as forms: a token count, a merchant's move
    tokens = urlencode({"count": "2"}) if media_type == FORM else multipart(count="2")
    assert_error(
        api.post("/api/v1/idempotency-tokens/", tokens, content_type=media_type),
        415,
        "UNSUPPORTED_MEDIA_TYPE",
    )
    move = urlencode({"to": "ACCEPTED"}) if media_type == FORM else multipart(to="ACCEPTED")
    order_id = placed.json()["id"]
    assert_error(
        merchant_api.post(f"/api/v1/orders/{order_id}/transition/", move, content_type=media_type),
        415,
        "UNSUPPORTED_MEDIA_TYPE",
    )
    assert Order.all_tenants.get(pk=order_id).status == "CREATED"


@pytest.mark.parametrize(
    ("environment", "window"), [({}, "60"), ({"IDEMPOTENCY_AUTO_KEY_WINDOW": "15"}, "15")]
)
def test_the_keyless_window_of_pay_cancel_and_moves_is_the_engine_s_setting(environment, window):
    """``IDEMPOTENCY_AUTO_KEY_WINDOW`` set the engine's automatic-key window while the pay,
    cancel and move views named 60 s of their own, so setting it changed nothing of theirs
    (red with the constant: 60 for every view whatever the environment)."""
    code = (
        "import django\n"
        "django.setup()\n"
        "from ordering.api.views import OrderCancelView, OrderPayView, OrderTransitionView\n"
        "print(*{view.post.idempotency_policy.auto_key_window\n"
        "        for view in (OrderPayView, OrderCancelView, OrderTransitionView)})\n"
    )
    done = run_with_environment(code, environment, unset=("IDEMPOTENCY_AUTO_KEY_WINDOW",))
    assert done.stdout.split() == [window], done.stderr


def test_every_401_of_the_schema_declares_the_www_authenticate_its_answer_carries(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    refusals = [
        (path, method, operation["responses"]["401"])
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if isinstance(operation, dict) and "401" in operation.get("responses", {})
    ]
    assert refusals, "no operation declares a 401"
    undeclared = [(p, m) for p, m, r in refusals if "WWW-Authenticate" not in r.get("headers", {})]
    assert undeclared == []
    assert client.get("/api/v1/menu/")["WWW-Authenticate"] == "Api-Key, Bearer"


@pytest.mark.parametrize(
    "authorization",
    ["Basic YTpi", "Token abc", "Bearer", "Api-Key ", "ApiKey abc.def", "Bearer\tabc"],
)
@pytest.mark.parametrize(
    "method, path", [("get", "/api/v1/orders/"), ("post", "/api/v1/orders/1/pay/")]
)
def test_an_authorization_of_no_scheme_the_api_takes_is_challenged_with_both(
    client, authorization, method, path
):
    """Red: "Api-Key" alone, where the detail says either scheme is expected and a request with
    no credential is challenged with both; a diner's operation (pay) was challenged with the
    one scheme its schema does not list."""
    no_body = {"data": b"", "content_type": "application/json"} if method == "post" else {}
    refused = getattr(client, method)(path, **no_body, HTTP_AUTHORIZATION=authorization)

    assert (refused.status_code, refused.json()["code"]) == (401, "API_KEY_INVALID")
    assert refused["WWW-Authenticate"] == "Api-Key, Bearer"


def test_each_read_s_operation_id_says_whether_it_answers_a_list_or_one_thing(client):
    """A client generated from the schema names its methods after the operation ids: the
    diner's order list was ``v1_orders_retrieve`` (drf-spectacular's guess for a GET on a
    view that is not a DRF list view), a method named for one order that answered a page of
    them, beside ``v1_menu_list`` and ``v1_orders_detail``."""
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    misnamed = []
    for path, operations in schema["paths"].items():
        read = operations.get("get")
        if read is None:
            continue
        answer = read["responses"]["200"]["content"]["application/json"]["schema"]
        named = schema["components"]["schemas"].get(answer.get("$ref", "").rsplit("/", 1)[-1])
        lists = answer.get("type") == "array" or "results" in (named or {}).get("properties", {})
        if read["operationId"].endswith("_list") != lists:
            misnamed.append((path, read["operationId"]))
    assert misnamed == []
    assert schema["paths"]["/api/v1/orders/"]["get"]["operationId"] == "v1_orders_list"


def test_a_write_that_creates_nothing_is_not_named_create(client):
    """Paying, cancelling, moving an order and checking tokens answer 200 and create nothing,
    yet drf-spectacular named each POST ``…_create``: a client generated from the schema
    called ``v1OrdersPayCreate(…)`` to pay."""
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    misnamed = [
        (path, write["operationId"])
        for path, operations in schema["paths"].items()
        if (write := operations.get("post")) is not None
        and "201" not in write["responses"]
        and write["operationId"].endswith("_create")
    ]
    assert misnamed == []
    assert schema["paths"]["/api/v1/orders/{order_id}/pay/"]["post"]["operationId"] == (
        "v1_orders_pay"
    )

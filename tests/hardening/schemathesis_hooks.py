"""schemathesis hooks for the hardening sweep (loaded through ``SCHEMATHESIS_HOOKS``).

Generated data alone almost never names a row that exists (a random int64 order id, a random
dish id), so most requests would stop at 404 / 422 and the success paths — where responses are
largest and schema drift shows — would go untested. These hooks mix the live tenant's real ids
(passed by the test in ``HARDENING_ORDER_IDS`` / ``HARDENING_DISH_IDS``) into generated cases,
and give every POST a fresh ``Idempotency-Key`` unless the case carries one (the contract
requires it on ``POST /api/v1/orders/``; the schema does not declare the header).

No Django import here: this module runs inside the schemathesis CLI process.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import schemathesis
from hypothesis import strategies as st


def _ids(name: str) -> list[int]:
    return [int(value) for value in os.environ.get(name, "").split(",") if value.strip()]


ORDER_IDS = [str(order_id) for order_id in _ids("HARDENING_ORDER_IDS")]  # as the schema has them
DISH_IDS = _ids("HARDENING_DISH_IDS")


@schemathesis.hook
def flatmap_path_parameters(
    context: schemathesis.HookContext, path_parameters: dict[str, Any] | None
) -> st.SearchStrategy:
    """Half of the cases aim at a real order of the live tenant."""
    if not path_parameters or "order_id" not in path_parameters or not ORDER_IDS:
        return st.just(path_parameters)
    return st.one_of(
        st.just(path_parameters),
        st.sampled_from(ORDER_IDS).map(lambda order_id: {**path_parameters, "order_id": order_id}),
    )


@schemathesis.hook
def flatmap_body(context: schemathesis.HookContext, body: Any) -> st.SearchStrategy:
    """Half of the order bodies name real dishes (so an order can actually be placed)."""
    items = body.get("items") if isinstance(body, dict) else None
    if not DISH_IDS or not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        return st.just(body)
    real = st.lists(st.sampled_from(DISH_IDS), min_size=len(items), max_size=len(items)).map(
        lambda dish_ids: {
            **body,
            "items": [{**item, "dish_id": d} for item, d in zip(items, dish_ids, strict=True)],
        }
    )
    return st.one_of(st.just(body), real)


@schemathesis.hook
def before_call(context: schemathesis.HookContext, case: schemathesis.Case, kwargs: Any) -> None:
    if case.method.upper() != "POST":
        return
    headers = dict(case.headers or {})
    if not any(name.lower() == "idempotency-key" for name in headers):
        headers["Idempotency-Key"] = uuid.uuid4().hex
        case.headers = headers

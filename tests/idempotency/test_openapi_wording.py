"""The engine's OpenAPI pieces speak of any host's callers; the product names its own refusals.

The engine is a library (``idempotency/README.md``): its schema helpers described a 403 as
"Tenant suspended, or not allowed for this API client" and a 409 as "…stock…" in every host's
schema, and an optional key's window as 60 s whatever the endpoint's. A host now gives its own
words for a status through ``IDEMPOTENCY["PROBLEM_DESCRIPTIONS"]``, and the product does.
"""

from __future__ import annotations

from typing import Any

from idempotency.web.openapi import idempotency_key_optional, problems

PRODUCT_WORDS = ("tenant", "stock", "order", "api client", "validation_error")


def descriptions(*statuses: int) -> dict[int, str]:
    return {status: response.description for (status, _), response in problems(*statuses).items()}


def test_without_a_host_s_words_the_engine_names_none_of_the_product_s(settings: Any) -> None:
    """(red with the earlier wording: the 403 and the 409 named tenants and stock)"""
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "PROBLEM_DESCRIPTIONS": {}}
    general = descriptions(400, 401, 403, 404, 409, 413, 415, 422, 429, 503)
    assert not [
        (status, word)
        for status, text in general.items()
        for word in PRODUCT_WORDS
        if word in text.lower()
    ]


def test_a_host_s_words_replace_the_engine_s_for_the_statuses_it_names(settings: Any) -> None:
    settings.IDEMPOTENCY = {**settings.IDEMPOTENCY, "PROBLEM_DESCRIPTIONS": {403: "Not yours"}}
    words = descriptions(403, 409)
    assert words[403] == "Not yours"
    assert words[409].startswith("Conflict: the resource's state")


def test_the_product_names_its_tenants_and_stock() -> None:
    words = descriptions(403, 409)
    assert words[403].startswith("Tenant suspended")
    assert "stock" in words[409]


def test_an_optional_key_states_the_endpoint_s_own_window() -> None:
    assert "within 15 s" in idempotency_key_optional(15).description

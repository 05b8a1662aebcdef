"""Keys: which client keys are valid, and the names every layer stores a key under.

The names are a storage format: Redis entries and business rows written by one release are
looked up by the next, so a change of layout (a digest's length, the hash tag, the bucket of a
hot tenant's key) would orphan every stored result. They are pinned here as the documented
layout (``idempotency/core/keys.py``), computed from SHA-256 directly. No Django needed.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter

import pytest

from idempotency.core.keys import (
    InvalidKey,
    ScopedKey,
    automatic_key,
    redis_key_for,
    validate_key,
)

SCOPED = ScopedKey(
    tenant="42", principal="diner:d-1", method="POST", route="api/v1/orders/", key="order-1"
)


def digest(*parts: str, length: int) -> str:
    """SHA-256 over each part followed by the unit separator 0x1F, cut to ``length`` hex."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() + b"\x1f")
    return h.hexdigest()[:length]


@pytest.mark.parametrize(
    "raw",
    [
        "a",
        "x" * 255,
        " leading-space",
        "tilde~",
        "".join(chr(c) for c in range(0x20, 0x7F) if c != 0x2C),
    ],
    ids=["one-char", "255-chars", "space-0x20", "tilde-0x7e", "every-printable-but-comma"],
)
def test_printable_ascii_keys_of_1_to_255_characters_but_the_comma_are_valid(raw: str) -> None:
    assert validate_key(raw) == raw


@pytest.mark.parametrize(
    "raw",
    ["", "x" * 256, "unit\x1fseparator", "delete\x7f", "caf\u00e9", "tab\t", "k,k"],
    ids=["empty", "256-chars", "0x1f", "0x7f", "non-ascii", "tab", "comma-header-sent-twice"],
)
def test_other_keys_are_refused(raw: str) -> None:
    with pytest.raises(InvalidKey):
        validate_key(raw)


def test_a_character_is_accepted_exactly_when_it_is_0x20_to_0x7e_but_the_comma() -> None:
    for code in [*range(0x100), 0x2028, 0x3000, 0xFEFF, 0x1F600]:
        expected = 0x20 <= code <= 0x7E and code != 0x2C
        try:
            accepted = validate_key(f"k{chr(code)}k") is not None
        except InvalidKey:
            accepted = False
        assert accepted is expected, hex(code)


def test_the_scope_is_principal_method_route_bounded_by_a_digest_of_the_whole() -> None:
    assert SCOPED.scope == "diner:d-1|POST|api/v1/orders/"
    long = ScopedKey(tenant="1", principal="p" * 300, method="POST", route="r", key="k")
    whole = hashlib.sha256(("p" * 300 + "|POST|r").encode()).hexdigest()
    assert long.scope == "p" * 190 + "#" + whole and len(long.scope) == 255


def test_the_redis_key_is_tagged_by_tenant_and_hashes_scope_and_key() -> None:
    scope_hash = digest(SCOPED.scope, length=16)
    key_hash = digest("order-1", length=32)
    assert SCOPED.redis_key == f"idem:{{t:42}}:{scope_hash}:{key_hash}"
    assert redis_key_for(tenant="42", scope=SCOPED.scope, key="order-1") == SCOPED.redis_key
    assert redis_key_for(tenant="42", scope=SCOPED.scope, key="order-1", buckets=1) == (
        SCOPED.redis_key
    )


@pytest.mark.parametrize("buckets", [2, 8])
def test_a_hot_tenants_key_goes_to_the_bucket_of_its_hash(buckets: int) -> None:
    bucket = int(digest("order-1", length=8), 16) % buckets
    split = dataclasses.replace(SCOPED, buckets=buckets)
    assert split.redis_key == (
        f"idem:{{t:42:{bucket}}}:{digest(SCOPED.scope, length=16)}:{digest('order-1', length=32)}"
    )
    # every bucket is used, and only those (one key, one slot)
    tags = Counter(
        redis_key_for(tenant="42", scope="s", key=f"k{i}", buckets=buckets).split("}")[0]
        for i in range(400)
    )
    assert set(tags) == {f"idem:{{t:42:{b}" for b in range(buckets)}


def test_the_business_key_is_64_hex_characters_of_tenant_scope_and_key() -> None:
    assert SCOPED.business_key == digest("42", SCOPED.scope, "order-1", length=64)
    other_tenant = dataclasses.replace(SCOPED, tenant="43")
    assert other_tenant.business_key != SCOPED.business_key


def test_only_automatic_keys_say_so() -> None:
    automatic = dataclasses.replace(SCOPED, key=automatic_key("ab" * 32), automatic=True)
    assert automatic.key == "auto:" + "ab" * 32
    assert automatic.is_automatic is True
    assert SCOPED.is_automatic is False
    # said by who derived the key, never read from its spelling
    assert dataclasses.replace(SCOPED, key=automatic_key("ab" * 32)).is_automatic is False


def test_a_scoped_key_cannot_change_once_its_names_are_derived() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SCOPED.key = "other"  # type: ignore[misc]
    assert {SCOPED: "usable as a dict key"}[SCOPED]

"""Canonical payloads and fingerprints: what must and must not change the fingerprint."""

from __future__ import annotations

import hashlib
import unicodedata
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from idempotency.core.fingerprint import (
    FINGERPRINT_VERSION,
    all_fingerprints,
    canonical_payload,
    canonical_value,
    diff_field_hashes,
    field_hashes,
    fingerprint,
    fingerprint_diff,
)

FAST = settings(max_examples=100, deadline=None)

# Text that exercises Unicode normalisation: combining marks, precomposed letters, Hangul.
TEXT = st.text(
    alphabet=st.sampled_from("aeiouAÉçñ\u0301\u0308\u00e9\u00f1\uac00\u1100\u1161 -_.,:"),
    max_size=12,
)
KEYS = st.text(alphabet="abcdefgh_", min_size=1, max_size=6)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.decimals(allow_nan=False, allow_infinity=False, places=4)
    | TEXT
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)
PAYLOADS = st.dictionaries(KEYS, VALUES, max_size=6)


def transform_strings(value: Any, form: str) -> Any:
    """The same payload with every string (keys included) in another normal form."""
    if isinstance(value, str):
        return unicodedata.normalize(form, value)
    if isinstance(value, dict):
        return {
            unicodedata.normalize(form, k): transform_strings(v, form) for k, v in value.items()
        }
    if isinstance(value, list):
        return [transform_strings(item, form) for item in value]
    return value


def reverse_key_order(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: reverse_key_order(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reverse_key_order(item) for item in value]
    return value


# --- properties -----------------------------------------------------------------------------


@FAST
@given(PAYLOADS)
def test_key_order_does_not_matter(payload: dict[str, Any]) -> None:
    assert fingerprint(reverse_key_order(payload), None) == fingerprint(payload, None)


@FAST
@given(PAYLOADS)
def test_unicode_normal_form_does_not_matter(payload: dict[str, Any]) -> None:
    nfd = transform_strings(payload, "NFD")
    nfc = transform_strings(payload, "NFC")
    assume(len(nfd) == len(payload) == len(nfc))  # no keys that collide once normalised
    assert fingerprint(nfd, None) == fingerprint(payload, None) == fingerprint(nfc, None)


@FAST
@given(st.integers(-(2**53), 2**53), st.integers(0, 6))
def test_equal_int_float_and_decimal_are_equal(number: int, zeros: int) -> None:
    padded = Decimal(number * 10**zeros).scaleb(-zeros)  # e.g. Decimal("2.000")
    forms = [number, float(number), Decimal(number), Decimal(f"{number}.{'0' * zeros}"), padded]
    assert len({fingerprint({"n": form}, ["n"]) for form in forms}) == 1


@FAST
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_float_equals_the_decimal_of_its_repr(number: float) -> None:
    assert canonical_value(number) == canonical_value(Decimal(repr(number)))


@FAST
@given(PAYLOADS, st.data())
def test_changing_a_declared_field_changes_the_fingerprint(
    payload: dict[str, Any], data: st.DataObject
) -> None:
    fields = sorted(payload)
    assume(fields)
    name = data.draw(st.sampled_from(fields))
    changed = {**payload, name: {"changed": payload[name]}}
    assert fingerprint(changed, fields) != fingerprint(payload, fields)


@FAST
@given(PAYLOADS, st.dictionaries(st.text("XYZ", min_size=1, max_size=3), VALUES, max_size=3))
def test_undeclared_fields_are_ignored(payload: dict[str, Any], volatile: dict[str, Any]) -> None:
    fields = sorted(payload)
    assert fingerprint({**payload, **volatile}, fields) == fingerprint(payload, fields)


@FAST
@given(PAYLOADS, st.data())
def test_diff_names_exactly_the_changed_fields(
    payload: dict[str, Any], data: st.DataObject
) -> None:
    fields = [*sorted(payload), "never_sent"]
    changed_names = data.draw(st.sets(st.sampled_from(fields)))
    other = {**payload, **{name: ["changed", payload.get(name)] for name in changed_names}}

    expected = sorted(changed_names)
    assert fingerprint_diff(payload, other, fields) == expected
    assert diff_field_hashes(field_hashes(payload, fields), field_hashes(other, fields)) == expected


# --- examples ---------------------------------------------------------------------------------


def test_canonical_form_is_sorted_compact_utf8_json() -> None:
    payload = {"b": "é", "a": [3, 1, {"y": 2.50, "x": None}], "c": True, "skip": 1}

    assert canonical_payload(payload, ["c", "b", "a"]) == (
        '{"a":[3,1,{"x":null,"y":2.5}],"b":"é","c":true}'.encode()
    )


def test_fingerprint_is_sha256_of_the_versioned_canonical_form() -> None:
    payload = {"a": 1}
    expected = hashlib.sha256(b"v1:" + canonical_payload(payload, None)).hexdigest()

    assert FINGERPRINT_VERSION == 1
    assert fingerprint(payload, None) == expected
    assert all_fingerprints(payload, None) == {1: expected}
    with pytest.raises(ValueError, match="version"):
        fingerprint(payload, None, version=2)


def test_absent_and_null_are_the_same() -> None:
    assert fingerprint({"a": 1, "coupon": None}, ["a", "coupon"]) == fingerprint(
        {"a": 1}, ["a", "coupon"]
    )
    assert fingerprint({"a": 1, "coupon": None}, None) == fingerprint({"a": 1}, None)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (True, 1),
        (False, 0),
        (2, "2"),
        ("", None),
        ([1, 2], [2, 1]),
        ([], {}),
        ({"x": None}, {}),  # nested null is kept: only a top-level null means "absent"
    ],
)
def test_values_that_must_stay_distinct(left: Any, right: Any) -> None:
    assert fingerprint({"v": left}, ["v"]) != fingerprint({"v": right}, ["v"])


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        (Decimal("-0.00"), b"0"),
        (-0.0, b"0"),
        (Decimal("1E+3"), b"1000"),
        (1e20, b"100000000000000000000"),
        (Decimal("0.00120"), b"0.0012"),
        (-1.5e-7, b"-0.00000015"),
        (10**25, b"10000000000000000000000000"),
    ],
)
def test_numbers_render_without_exponent_or_trailing_zeros(value: Any, rendered: bytes) -> None:
    assert canonical_value(value) == rendered


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), -float("inf"), Decimal("NaN"), Decimal("-Infinity")]
)
def test_nan_and_infinity_are_refused(value: Any) -> None:
    with pytest.raises(ValueError):
        fingerprint({"v": value}, None)


def test_hostile_exponents_are_refused() -> None:
    with pytest.raises(ValueError):
        canonical_value(Decimal("1E+999999999"))


@pytest.mark.parametrize("value", [b"bytes", {1, 2}, object()])
def test_unsupported_types_are_refused(value: Any) -> None:
    with pytest.raises(TypeError):
        fingerprint({"v": value}, None)


def test_lone_surrogates_do_not_crash() -> None:
    """JSON allows "\\ud800"; a malformed client must get a fingerprint, not a 500."""
    assert fingerprint({"v": "\ud800"}, None) != fingerprint({"v": "\ud801"}, None)


def test_field_hashes_are_short_and_can_be_keyed() -> None:
    plain = field_hashes({"a": 1, "b": None}, ["a", "b"])
    keyed = field_hashes({"a": 1}, ["a"], secret=b"s3cret")

    assert list(plain) == ["a"] and len(plain["a"]) == 16
    assert keyed["a"] != plain["a"]
    assert diff_field_hashes({"a": "1", "b": "2"}, {"a": "1", "c": "3"}) == ["b", "c"]


def test_fields_must_be_a_sequence_of_names() -> None:
    with pytest.raises(TypeError):
        fingerprint({"abc": 1}, "abc")


def test_the_canonical_form_of_version_1_is_pinned_byte_for_byte() -> None:
    """Fingerprints are stored (Redis, the record) and compared by the next release: version
    1's canonical form may never change. Keys and strings are raw UTF-8 (no ``\\u`` escapes),
    keys sorted, no spaces, numbers in their plain form, absent and ``null`` fields dropped."""
    payload = {
        "note": {"café": "crème brûlée", "n": Decimal("2.50"), "tags": ["b", "a"]},
        "items": [{"dish_id": 7, "quantity": 2.0}],
        "coupon_code": None,
    }
    canonical = canonical_payload(payload, ("items", "note", "coupon_code", "absent"))
    expected = (
        '{"items":[{"dish_id":7,"quantity":2}],'
        '"note":{"café":"crème brûlée","n":2.5,"tags":["b","a"]}}'
    ).encode()
    assert canonical == expected
    assert fingerprint(payload, ("items", "note", "coupon_code", "absent")) == (
        hashlib.sha256(b"v1:" + expected).hexdigest()
    )


# Two combining marks of different classes (below, above): NFC sorts each run of them, one
# step per pair out of order, so a run's cost grows with the square of its length.
ZALGO = "a" + "\u0301\u0316" * 125_000


@pytest.mark.parametrize("where", ["value", "name", "nested name"])
def test_a_string_past_unicode_s_stream_safe_limit_has_no_canonical_form(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    # given half a megabyte of combining marks after one letter, which took a worker minutes
    # to put in NFC (a form body reaches the fingerprint without the JSON parser's refusal)
    normalised: list[str] = []
    real = unicodedata.normalize
    monkeypatch.setattr(unicodedata, "normalize", lambda f, s: normalised.append(s) or real(f, s))
    data: dict[str, Any] = {
        "value": {"note": ZALGO},
        "name": {ZALGO: "x", "note": "n"},
        "nested name": {"contact": {ZALGO: "x"}},
    }[where]
    # then it is refused (the engine's 400 IDEMPOTENCY_PAYLOAD_INVALID) before any NFC of it
    with pytest.raises(ValueError, match="more than 30 combining characters in a row"):
        fingerprint(data, ["note", "contact"])
    assert ZALGO not in normalised


def test_thirty_combining_marks_in_a_row_are_put_in_nfc() -> None:
    run = "\u0301\u0316" * 15
    assert fingerprint({"note": "a" + run}, ["note"]) == fingerprint(
        {"note": unicodedata.normalize("NFC", "a" + run)}, ["note"]
    )


# Characters that are no combining mark themselves (class 0, or one mark) but decompose into
# combining marks of two classes: NFC sorts their decomposition, U+0F71 U+0F72 U+0F71 U+0F72 ...
DECOMPOSING_INTO_MARKS = {
    "tibetan vowel sign ii": "\u0f73",  # U+0F71 (class 129) U+0F72 (class 130)
    "tibetan vowel sign uu": "\u0f75",  # U+0F71 U+0F74
    "greek dialytika tonos": "\u0344",  # U+0308 U+0301, one mark counted once
}


@pytest.mark.parametrize("char", DECOMPOSING_INTO_MARKS.values(), ids=DECOMPOSING_INTO_MARKS)
def test_characters_that_decompose_into_combining_marks_count_as_their_marks(
    monkeypatch: pytest.MonkeyPatch, char: str
) -> None:
    # given a letter and 150,000 characters that NFC decomposes into two combining marks each
    # (50 KB of U+0F73 took a worker 20 s to put in NFC, sent past a count of marks as written)
    real = unicodedata.normalize

    def normalize_short(form: str, text: str) -> str:
        assert len(text) < 1000, "the whole run was put in NFC"  # red: minutes, not a refusal
        return real(form, text)

    monkeypatch.setattr(unicodedata, "normalize", normalize_short)
    # then it is refused before any NFC of it, as the marks it stands for
    with pytest.raises(ValueError, match="more than 30 combining characters in a row"):
        fingerprint({"note": "a" + char * 150_000}, ["note"])
    monkeypatch.undo()
    with pytest.raises(ValueError, match="more than 30 combining characters in a row"):
        fingerprint({"note": "a" + char * 16}, ["note"])
    # and 15 of them, 30 marks, are put in NFC
    assert fingerprint({"note": "a" + char * 15}, ["note"]) == fingerprint(
        {"note": unicodedata.normalize("NFC", "a" + char * 15)}, ["note"]
    )

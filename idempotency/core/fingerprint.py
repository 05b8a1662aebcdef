"""Canonical business payloads and their fingerprints (seed 4.1, 2.2).

A fingerprint answers "is this the same operation?" for two requests that carry the same
idempotency key. It must therefore ignore what does not change the operation (key order,
Unicode normal form, ``2`` vs ``2.0`` vs ``Decimal("2.00")``, absent vs ``null``, volatile
fields the endpoint did not declare) and must notice everything that does (any declared
value, list order, ``True`` vs ``1``, the number ``2`` vs the string ``"2"``).

The canonical form is versioned: :data:`FINGERPRINT_VERSION` is mixed into every hash, and
the stores keep the version next to the fingerprint, so the form can evolve in a rolling
deploy (see ``RedisIdempotencyStore.claim``'s ``fingerprints`` argument).

Fingerprints and per-field hashes the engine stores are keyed (HMAC-SHA256 under one of
``IDEMPOTENCY["HASH_KEYS"]``, :mod:`idempotency.core.hashing`), and the version says which key:
``keyed_version(key_id) = 100 x key_id + form``. Version ``1`` is the unkeyed SHA-256 of form 1,
still computed so that entries stored before keys existed verify; a request carries its
fingerprint under every configured key (:func:`keyed_fingerprints`), so entries stored under
the previous key verify during a rotation.

Per-field hashes (:func:`field_hashes`) let a mismatch audit say *which* declared fields
differed without storing the values themselves.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import math
import unicodedata
from collections.abc import Mapping, Sequence
from decimal import Decimal
from json.encoder import encode_basestring as _json_string  # json.dumps(s, ensure_ascii=False)

__all__ = [
    "FINGERPRINT_VERSION",
    "SUPPORTED_VERSIONS",
    "all_fingerprints",
    "canonical_payload",
    "canonical_value",
    "diff_field_hashes",
    "field_hashes",
    "fingerprint",
    "fingerprint_diff",
    "key_id_of",
    "keyed_fingerprints",
    "keyed_version",
    "stream_safe_nfc",
]

FINGERPRINT_VERSION = 1
"""The version new fingerprints are computed under."""

SUPPORTED_VERSIONS: tuple[int, ...] = (1,)
"""Every canonical form this code can compute; a rolling deploy passes all to ``claim``."""

_KEYED = 100  # keyed version = _KEYED * key id + form


def keyed_version(key_id: int, form: int = FINGERPRINT_VERSION) -> int:
    """The version of a fingerprint of ``form`` keyed under hash key ``key_id``."""
    return _KEYED * key_id + form


def key_id_of(version: int) -> int | None:
    """The hash key a version was keyed under; None for an unkeyed version."""
    return version // _KEYED or None


FIELD_HASH_HEX_CHARS = 16
"""Per-field hashes are truncated: they only need to tell fields apart, not resist attack."""

# Python refuses to print ints above 4300 digits by default; refusing numbers whose plain
# rendering would be that long keeps a hostile "1E+999999999" from costing gigabytes.
_MAX_NUMBER_DIGITS = 4300


def canonical_payload(data: Mapping[str, object], fields: Sequence[str] | None) -> bytes:
    """The canonical UTF-8 JSON of the declared top-level ``fields`` of ``data``.

    ``fields=None`` declares every top-level field present. A declared field that is absent
    and one that is explicitly ``null`` canonicalise the same (clients differ in which they
    send); nested values are kept in full, nested ``null`` included.
    """
    return _render(_select(data, fields)).encode("utf-8", "surrogatepass")


def canonical_value(value: object) -> bytes:
    """The canonical UTF-8 JSON of one value, as used inside :func:`canonical_payload`."""
    return _render(value).encode("utf-8", "surrogatepass")


def fingerprint(
    data: Mapping[str, object],
    fields: Sequence[str] | None,
    *,
    version: int = FINGERPRINT_VERSION,
    secret: bytes | None = None,
) -> str:
    """Hex SHA-256 (HMAC-SHA256 under ``secret`` for a keyed version) of ``"v<version>:"`` +
    the canonical payload.

    Only forms in :data:`SUPPORTED_VERSIONS` are accepted: labelling a hash with a version
    whose canonical form this code does not implement would make later comparisons lie; a
    keyed version needs its ``secret``, an unkeyed one refuses one.
    """
    return _hashed(canonical_payload(data, fields), version, secret)


def keyed_fingerprints(
    data: Mapping[str, object], fields: Sequence[str] | None, keys: Sequence[tuple[int, bytes]]
) -> dict[int, str]:
    """The fingerprint under every ``(key_id, secret)`` and the unkeyed form-1 version, for
    ``claim``: entries stored under any of them verify.

    The payload is rendered once and hashed under each version (every request pays this,
    replays included; there is one canonical form, :data:`SUPPORTED_VERSIONS`)."""
    canonical = canonical_payload(data, fields)
    result = {version: _hashed(canonical, version) for version in SUPPORTED_VERSIONS}
    for key_id, secret in keys:
        for form in SUPPORTED_VERSIONS:
            version = keyed_version(key_id, form)
            result[version] = _hashed(canonical, version, secret)
    return result


def all_fingerprints(data: Mapping[str, object], fields: Sequence[str] | None) -> dict[int, str]:
    """The fingerprint under every supported version, ready for ``RedisIdempotencyStore.claim``."""
    canonical = canonical_payload(data, fields)
    return {version: _hashed(canonical, version) for version in SUPPORTED_VERSIONS}


def _hashed(canonical: bytes, version: int, secret: bytes | None = None) -> str:
    _check_version(version, secret)
    payload = f"v{version}:".encode("ascii") + canonical
    if secret is None:
        return hashlib.sha256(payload).hexdigest()
    return hmac.digest(secret, payload, "sha256").hex()


def field_hashes(
    data: Mapping[str, object],
    fields: Sequence[str] | None,
    *,
    secret: bytes | None = None,
    version: int = FINGERPRINT_VERSION,
) -> dict[str, str]:
    """Short per-field hashes of the declared fields that are present (absent == ``null``).

    Kept beside the fingerprint so that a later mismatch can name the differing fields.
    A low-entropy value (a quantity, a coupon code) can be recovered from a plain hash by
    trying candidates; pass ``secret`` to key the hashes (HMAC-SHA256) when that matters.
    """
    _check_form(version)
    selected = _select(data, fields)
    return {
        name: _short_hash(
            f"v{version}:{name}:".encode("utf-8", "surrogatepass") + canonical_value(value), secret
        )
        for name, value in selected.items()
    }


def diff_field_hashes(a: Mapping[str, str], b: Mapping[str, str]) -> list[str]:
    """Sorted names whose hashes differ, a name present on one side only included."""
    return sorted(name for name in a.keys() | b.keys() if a.get(name) != b.get(name))


def fingerprint_diff(
    a: Mapping[str, object], b: Mapping[str, object], fields: Sequence[str] | None
) -> list[str]:
    """Sorted names of the declared top-level fields whose canonical forms differ."""
    left, right = _select(a, fields), _select(b, fields)
    return sorted(
        name
        for name in left.keys() | right.keys()
        if name not in left or name not in right or _render(left[name]) != _render(right[name])
    )


def _check_form(version: int) -> None:
    if version % _KEYED not in SUPPORTED_VERSIONS:
        raise ValueError(f"unsupported fingerprint version {version!r}")


def _check_version(version: int, secret: bytes | None = None) -> None:
    _check_form(version)
    if (key_id_of(version) is None) != (secret is None):
        raise ValueError(f"fingerprint version {version!r} is keyed iff a secret is given")


def _short_hash(payload: bytes, secret: bytes | None) -> str:
    if secret is None:
        digest = hashlib.sha256(payload).hexdigest()
    else:
        digest = hmac.digest(secret, payload, "sha256").hex()
    return digest[:FIELD_HASH_HEX_CHARS]


def _select(data: Mapping[str, object], fields: Sequence[str] | None) -> dict[str, object]:
    """The declared fields that carry a value, keyed by their NFC-normalised names."""
    if not isinstance(data, Mapping):
        raise TypeError(f"payload must be a mapping, not {type(data).__name__}")
    if isinstance(fields, str):
        raise TypeError("fields must be a sequence of names, not a single str")
    normalised = _normalised_items(data)
    names = normalised.keys() if fields is None else [_key(name) for name in fields]
    return {name: normalised[name] for name in names if normalised.get(name) is not None}


def _normalised_items(value: Mapping[object, object]) -> dict[str, object]:
    """The mapping with NFC keys; two keys that only differ in normal form are an error."""
    items: dict[str, object] = {}
    for raw_key, item in value.items():
        key = _key(raw_key)
        if key in items:
            raise ValueError(f"keys collide after NFC normalisation: {key!r}")
        items[key] = item
    return items


def _key(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"field names must be str, not {type(name).__name__}")
    return stream_safe_nfc(name)


MAX_NON_STARTERS = 30
"""Combining characters in a row that a string may hold: Unicode's stream-safe limit (UAX
#15), which no text needs to pass."""


def stream_safe_nfc(text: str) -> str:
    """``text`` in NFC; a ``ValueError`` (no canonical form) past :data:`MAX_NON_STARTERS`.

    NFC sorts each run of combining characters by class, at a cost that grows with the square
    of the run's length: one letter and half a megabyte of marks took a worker minutes. A
    string already in NFC (the check is cheap) is taken as it is; any other is counted
    first, in one pass."""
    if unicodedata.is_normalized("NFC", text):
        return text
    run = 0
    for char in text:
        leading, trailing, length = _non_starters(char)
        if run + leading > MAX_NON_STARTERS:
            raise ValueError(
                f"a string holds more than {MAX_NON_STARTERS} combining characters in a row"
            )
        run = run + length if leading == length else trailing
    return unicodedata.normalize("NFC", text)


@functools.lru_cache(maxsize=4096)
def _non_starters(char: str) -> tuple[int, int, int]:
    """How many combining characters (non-starters) ``char``'s canonical decomposition begins
    and ends with, and how long it is: what NFC sorts is the decomposition, and a few
    characters that are no combining character themselves decompose into them (TIBETAN VOWEL
    SIGN II is U+0F71 U+0F72), so counting ``char`` alone let a run of them through."""
    if not unicodedata.decomposition(char):
        count = 1 if unicodedata.combining(char) else 0
        return count, count, 1
    marks = [unicodedata.combining(part) != 0 for part in unicodedata.normalize("NFD", char)]
    leading = next((i for i, mark in enumerate(marks) if not mark), len(marks))
    trailing = next((i for i, mark in enumerate(reversed(marks)) if not mark), len(marks))
    return leading, trailing, len(marks)


def _render(value: object) -> str:
    """Compact JSON with sorted keys, NFC strings and normalised numbers (see module doc)."""
    if value is None:
        return "null"
    if isinstance(value, bool):  # before int: bool is an int subclass, and True != 1 here
        return "true" if value else "false"
    if isinstance(value, int | float | Decimal):
        return _render_number(value)
    if isinstance(value, str):
        return _json_string(stream_safe_nfc(value))
    if isinstance(value, Mapping):
        return _render_mapping(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(_render(item) for item in value) + "]"
    raise TypeError(f"cannot canonicalise {type(value).__name__}")


def _render_mapping(value: Mapping[object, object]) -> str:
    items = _normalised_items(value)
    parts = (_json_string(key) + ":" + _render(items[key]) for key in sorted(items))
    return "{" + ",".join(parts) + "}"


def _render_number(value: int | float | Decimal) -> str:
    """Render via Decimal: trailing zeros stripped, no exponent, ``-0`` is ``0``.

    A float goes through its shortest ``repr`` so that ``0.1`` equals ``Decimal("0.1")``
    rather than the float's exact binary expansion.
    """
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("NaN and infinity have no canonical form")
        number = Decimal(repr(value))
    elif isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError("NaN and infinity have no canonical form")
        number = value
    else:
        number = Decimal(value)
    if number.is_zero():
        return "0"
    sign, digit_tuple, exponent = number.as_tuple()
    assert isinstance(exponent, int)  # finite, checked above
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    if len(stripped) + abs(exponent) > _MAX_NUMBER_DIGITS:
        raise ValueError("number too large to canonicalise")
    return ("-" if sign else "") + _plain(stripped, exponent)


def _plain(digits: str, exponent: int) -> str:
    """``digits * 10**exponent`` written out without an exponent (``digits`` has no zeros at
    either end)."""
    if exponent >= 0:
        return digits + "0" * exponent
    point = len(digits) + exponent
    if point > 0:
        return digits[:point] + "." + digits[point:]
    return "0." + "0" * -point + digits

"""A JSON parser that refuses what the standard one lets through to crash later.

DRF's ``JSONParser`` maps ``ValueError`` to 400 but not ``RecursionError`` (10 000 nested
arrays), and Python's ``json`` turns ``1e999999`` into ``inf`` and accepts ``NaN``/``Infinity``,
which no business field wants and which cannot be fingerprinted; and it keeps the last of
two members of one name. Here all of these are a 400 ``INVALID_JSON``, and so are nesting
deeper than ``MAX_DEPTH`` and a body of more than ``MAX_VALUES`` values: no request of the API
needs more than about a thousand (1,000 tokens to check, 50 lines of an order), and what reads
a body after the parser (this module's own NFC pass, the idempotency fingerprint, the
serializers, an error naming each bad element) costs in proportion to its values. A 1 MB body
of 350,000 ``[]`` took a worker 13 to 17 s to refuse; here it costs its ``json.loads`` (tens of
ms) and a count that stops at the limit.

The body is then read as the idempotency fingerprint reads it (``idempotency.core.fingerprint``):
every string value in Unicode NFC, and a top-level member whose value is ``null`` as absent.
Two requests the fingerprint calls the same operation (a retry under the same key) are then
the same input to the view too: an address sent decomposed, or a ``"note": null`` a client
sends where another leaves the field out, cannot get one answer first and another on a retry
with a new key. Member names are left as sent: names that collide once normalised are the
fingerprint's to refuse (``IDEMPOTENCY_PAYLOAD_INVALID``).
"""

from __future__ import annotations

import codecs
import json
import math
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from config.api_errors import clip
from idempotency.core.fingerprint import stream_safe_nfc

MAX_DEPTH = 32
MAX_VALUES = 10_000  # every value counts: objects, arrays, strings, numbers, booleans, nulls
TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels"


class StrictJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        encoding = (parser_context or {}).get("encoding", "utf-8")
        try:
            if not codecs.lookup(encoding)._is_text_encoding:  # e.g. charset=zlib, rot13
                raise LookupError(f"{encoding} is not a text encoding")
            text = stream.read().decode(encoding)
        except (LookupError, UnicodeError) as exc:  # UnicodeError: punycode's, undefined's
            raise ParseError(clip(f"Cannot decode the body: {exc}")) from None
        try:
            data = json.loads(
                text,
                parse_constant=_refuse_constant,
                parse_float=_finite_float,
                object_pairs_hook=_unique_names,
            )
        except _RepeatedName as exc:
            raise ParseError(
                f"JSON names the member {clip(repr(exc.name))} twice in one object"
            ) from None
        except (ValueError, RecursionError) as exc:
            raise ParseError(clip(f"JSON parse error - {_why(exc)}")) from None
        refused = _shape_refusal(data)
        if refused:
            raise ParseError(refused)
        if isinstance(data, dict):
            data = {name: value for name, value in data.items() if value is not None}
        return _nfc(data)


def _why(error: ValueError | RecursionError) -> str:
    """What was wrong with the body, in the JSON's terms: the decoder's own message (with the
    line and column), this module's refusals, and for what the interpreter raised (a nesting
    deeper than its recursion limit, an integer past its digit limit) a sentence of ours, not
    its message, which names its internals (``sys.set_int_max_str_digits``)."""
    if isinstance(error, RecursionError):
        return TOO_DEEP
    if isinstance(error, (json.JSONDecodeError, _Refused)):
        return str(error)
    return "a number has too many digits"


class _Refused(ValueError):
    """A value this parser refuses (``NaN``, a number out of range)."""


class _RepeatedName(Exception):
    def __init__(self, name: str) -> None:
        self.name = name


def _unique_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Each object of the body, refused when it names a member twice: ``json`` keeps the last
    value without a word, where another reader of the same bytes (a gateway, a log, the
    client's own tests) may keep the first, and the fingerprint already refuses names that
    only collide once normalised. Checked in the one parse: a second parse with the names
    kept in pairs cost as much again on every body."""
    members = dict(pairs)
    if len(members) != len(pairs):
        seen: set[str] = set()
        raise _RepeatedName(next(name for name, _ in pairs if name in seen or seen.add(name)))
    return members


def _refuse_constant(name: str) -> float:
    raise _Refused(f"{name} is not a number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"number out of range: {clip(text)}")
    return value


def _nfc(value: Any) -> Any:
    """``value`` with every string in it in NFC (recursion is bounded by ``MAX_DEPTH``).
    Member names are left as sent, but refused like values past Unicode's stream-safe limit
    (:func:`idempotency.core.fingerprint.stream_safe_nfc`): the idempotency fingerprint puts
    them in NFC."""
    if isinstance(value, str):
        return _normalised(value)
    if isinstance(value, dict):
        return {_stream_safe(name): _nfc(item) for name, item in value.items()}
    if isinstance(value, list):
        return [_nfc(item) for item in value]
    return value


def _normalised(text: str) -> str:
    try:
        return stream_safe_nfc(text)
    except ValueError as exc:
        raise ParseError(str(exc)) from None


def _stream_safe(name: str) -> str:
    _normalised(name)
    return name


def _shape_refusal(data: Any) -> str | None:
    """Why ``data`` is too deep (a container below ``MAX_DEPTH`` levels) or too big (more than
    ``MAX_VALUES`` values), if it is. One walk without recursion; a container's members are
    counted before they are walked, so a refused body is never walked whole."""
    values, stack = 1, [(data, 1)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            if level > MAX_DEPTH:
                return f"JSON {TOO_DEEP}"
            values += len(value)
            if values > MAX_VALUES:
                return f"JSON body of more than {MAX_VALUES} values"
            stack.extend((item, level + 1) for item in value)
    return None

"""A JSON parser that refuses what the standard one lets through to crash later.

DRF's ``JSONParser`` maps ``ValueError`` to 400 but not ``RecursionError`` (10 000 nested
arrays), and Python's ``json`` turns ``1e999999`` into ``inf`` and accepts ``NaN``/``Infinity``,
which no business field wants and which cannot be fingerprinted. Here all of these are a
400 ``INVALID_JSON``, and nesting deeper than ``MAX_DEPTH`` is refused too.
"""

from __future__ import annotations

import codecs
import json
import math
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from config.api_errors import clip

MAX_DEPTH = 32


class StrictJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        encoding = (parser_context or {}).get("encoding", "utf-8")
        try:
            if not codecs.lookup(encoding)._is_text_encoding:  # e.g. charset=zlib, rot13
                raise LookupError(f"{encoding} is not a text encoding")
            text = stream.read().decode(encoding)
        except (LookupError, UnicodeDecodeError) as exc:
            raise ParseError(clip(f"Cannot decode the body: {exc}")) from None
        try:
            data = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
        except (ValueError, RecursionError) as exc:
            raise ParseError(clip(f"JSON parse error - {exc.__class__.__name__}: {exc}")) from None
        if _depth(data) > MAX_DEPTH:
            raise ParseError(f"JSON nested deeper than {MAX_DEPTH} levels")
        return data


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {clip(text)}")
    return value


def _depth(data: Any) -> int:
    """Nesting depth, without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                return level
            stack.extend((item, level + 1) for item in value)
    return deepest

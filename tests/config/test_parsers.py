"""The JSON parser answers 400 for a body it cannot decode, whatever the codec raises."""

from __future__ import annotations

import io

import pytest
from rest_framework.exceptions import ParseError

from config.parsers import StrictJSONParser


@pytest.mark.parametrize("encoding", ["punycode", "undefined", "zlib", "no-such"])
def test_a_body_the_codec_cannot_decode_is_a_parse_error(encoding: str) -> None:
    # given a charset whose codec raises a bare UnicodeError (punycode, undefined), a
    # UnicodeDecodeError, a LookupError or is not a text encoding; the middleware refuses these
    # before a view runs, and the parser still never lets one through as a 500
    with pytest.raises(ParseError, match="Cannot decode the body"):
        StrictJSONParser().parse(io.BytesIO(b'{"a": 1}'), None, {"encoding": encoding})

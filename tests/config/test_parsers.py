"""The JSON parser answers 400 for a body it cannot decode, whatever the codec raises."""

from __future__ import annotations

import io
import json
import unicodedata

import pytest
from rest_framework.exceptions import ParseError

from config import parsers
from config.parsers import StrictJSONParser


@pytest.mark.parametrize("encoding", ["punycode", "undefined", "zlib", "no-such"])
def test_a_body_the_codec_cannot_decode_is_a_parse_error(encoding: str) -> None:
    # given a charset whose codec raises a bare UnicodeError (punycode, undefined), a
    # UnicodeDecodeError, a LookupError or is not a text encoding; the middleware refuses these
    # before a view runs, and the parser still never lets one through as a 500
    with pytest.raises(ParseError, match="Cannot decode the body"):
        StrictJSONParser().parse(io.BytesIO(b'{"a": 1}'), None, {"encoding": encoding})


def parse(body: bytes) -> object:
    return StrictJSONParser().parse(io.BytesIO(body), None, {"encoding": "utf-8"})


def test_a_body_of_at_most_max_values_values_is_read() -> None:
    # the object, its one member's list and that many numbers
    body = b'{"tokens": [%s]}' % b",".join([b"0"] * (parsers.MAX_VALUES - 2))
    assert len(parse(body)["tokens"]) == parsers.MAX_VALUES - 2  # type: ignore[index]


@pytest.mark.parametrize(
    "element",
    [b"0", b"[]", b"{}", b'"x"', b"null"],
    ids=["number", "list", "object", "str", "null"],
)
def test_a_body_of_more_values_is_refused_before_it_is_walked(
    monkeypatch: pytest.MonkeyPatch, element: bytes
) -> None:
    # given a body one value over the limit, and one of the probe's 350,000 elements
    walked: list[object] = []
    monkeypatch.setattr(parsers, "_nfc", lambda value: walked.append(value) or value)
    for count in (parsers.MAX_VALUES - 1, 350_000):
        body = b'{"tokens": [%s]}' % b",".join([element] * count)
        with pytest.raises(ParseError, match="more than 10000 values"):
            parse(body)
    # then nothing after the count ran over the values (NFC, and all that reads request.data)
    assert walked == []


@pytest.mark.parametrize(("levels", "refused"), [(32, False), (33, True)])
def test_nesting_is_refused_below_max_depth(levels: int, refused: bool) -> None:
    body = b"[" * levels + b"]" * levels
    if refused:
        with pytest.raises(ParseError, match="nested deeper than 32 levels"):
            parse(body)
    else:
        assert parse(body) is not None


@pytest.mark.parametrize(
    "body",
    [b'{"a": 1, "a": 1}', b'{"a": [{"b": 1, "c": {"d": 1, "d": 2}}]}', b'[{"x": 1, "x": 2}]'],
    ids=["top-level", "nested", "in-a-list"],
)
def test_a_member_named_twice_in_one_object_is_refused(body: bytes) -> None:
    with pytest.raises(ParseError, match="twice in one object"):
        parse(body)


def test_the_same_name_in_two_objects_is_read() -> None:
    assert parse(b'[{"a": 1}, {"a": 2}]') == [{"a": 1}, {"a": 2}]


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 32 levels"),
        (b'{"count": ' + b"7" * 5000 + b"}", "a number has too many digits"),
        (b'{"amount": NaN}', "NaN is not a number"),
        (b'{"amount": 1e400}', "number out of range: 1e400"),
        (b'{"a": }', "Expecting value: line 1 column 7"),
    ],
    ids=["recursion-limit", "int-digit-limit", "nan", "infinite", "malformed"],
)
def test_a_parse_error_says_what_is_wrong_with_the_json_not_the_interpreter_s_internals(
    body: bytes, said: str
) -> None:
    """Red before: "RecursionError: maximum recursion depth exceeded …" and "… use
    sys.set_int_max_str_digits() to increase the limit" reached the caller's ``detail``."""
    with pytest.raises(ParseError) as refused:
        parse(body)
    detail = str(refused.value.detail)
    assert detail.startswith(f"JSON parse error - {said}")
    assert "Error" not in detail and "sys." not in detail


# Two combining marks of different classes (below, above): NFC sorts each run of them, one
# step per pair out of order, so a run's cost grows with the square of its length.
BELOW, ABOVE = "\u0316", "\u0301"


def body_with(name: str, value: str) -> bytes:
    return json.dumps({name: value}, ensure_ascii=False).encode()


@pytest.mark.parametrize("where", ["value", "name"])
def test_a_string_with_more_combining_marks_in_a_row_than_unicode_s_stream_safe_limit_is_refused(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    # given half a megabyte of marks after one letter, which took a worker more than the
    # 30 s gunicorn allows to put in NFC, in a value (this parser's NFC) or a member's name
    # (the idempotency fingerprint's)
    normalised: list[str] = []
    real = unicodedata.normalize
    monkeypatch.setattr(
        unicodedata, "normalize", lambda form, s: normalised.append(s) or real(form, s)
    )
    zalgo = "a" + (ABOVE + BELOW) * 125_000
    body = body_with(zalgo, "x") if where == "name" else body_with("note", zalgo)
    # red: the value was normalised (minutes), the name passed on as it was
    with pytest.raises(ParseError, match="more than 30 combining characters in a row"):
        parse(body)
    assert normalised == []


def test_a_string_within_the_stream_safe_limit_is_read_in_nfc() -> None:
    # 30 marks in a row, out of canonical order, after each letter: the most any text needs
    run = (ABOVE + BELOW) * 15
    parsed = parse(body_with("note", ("a" + run) * 100))
    assert parsed == {"note": unicodedata.normalize("NFC", ("a" + run) * 100)}
    named = parse(body_with("a" + run, "x"))
    assert named == {"a" + run: "x"}  # names are left as sent (the fingerprint's to normalise)


def test_a_run_of_characters_that_decompose_into_combining_marks_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a letter and 150,000 TIBETAN VOWEL SIGN II, no combining mark itself (class 0)
    # but U+0F71 U+0F72 in NFC's sort: 50 KB of them held a worker 20 s
    real = unicodedata.normalize

    def normalize_short(form: str, text: str) -> str:
        assert len(text) < 1000, "the whole run was put in NFC"  # red: minutes, not a refusal
        return real(form, text)

    monkeypatch.setattr(unicodedata, "normalize", normalize_short)
    # then the parser counts the marks they decompose into, and refuses the run
    with pytest.raises(ParseError, match="more than 30 combining characters in a row"):
        parse(body_with("note", "a" + "\u0f73" * 150_000))
    monkeypatch.undo()
    assert parse(body_with("note", "a" + "\u0f73" * 15)) == {
        "note": unicodedata.normalize("NFC", "a" + "\u0f73" * 15)
    }

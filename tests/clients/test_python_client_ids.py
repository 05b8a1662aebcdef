"""The Python client's default operation id: the request in the canonical form the server's
fingerprint reads (strings in NFC), hashed."""

from __future__ import annotations

import unicodedata

import pytest
from ordering_client import client as ordering_client

ORDERS = "/api/v1/orders/"


def test_a_note_the_server_refuses_for_its_combining_marks_is_named_without_nfc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a diner's note an app passes on: a letter and 150,000 TIBETAN VOWEL SIGN II, which
    # NFC sorts as U+0F71 U+0F72 ... (the server refuses it: 400 INVALID_JSON)
    note = "a" + "\u0f73" * 150_000
    real = unicodedata.normalize

    def normalize_short(form: str, text: str) -> str:
        assert len(text) < 1000, "the whole note was put in NFC"  # red: minutes, not an id
        return real(form, text)

    monkeypatch.setattr(unicodedata, "normalize", normalize_short)
    # then the operation is named without putting the note in NFC, and always alike
    body = {"items": [{"dish_id": 1, "quantity": 1}], "note": note}
    assert ordering_client._request_id("POST", ORDERS, body) == ordering_client._request_id(
        "POST", ORDERS, dict(body)
    )


def test_a_note_sent_decomposed_names_the_same_operation_as_composed() -> None:
    composed = {"note": "caf\u00e9 \u00e0 emporter"}
    decomposed = {"note": unicodedata.normalize("NFD", composed["note"])}
    assert ordering_client._request_id("POST", ORDERS, composed) == ordering_client._request_id(
        "POST", ORDERS, decomposed
    )

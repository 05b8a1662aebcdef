"""Who may make which move, read from the FSM: the 409 answer names the moves allowed now, and
the committed lifecycle diagram is the one the transitions draw."""

from __future__ import annotations

import shutil
import struct
import zlib

import pytest
from django.core.management import CommandError, call_command

from ordering.lifecycle_diagram import (
    DOT_PATH,
    PNG_PATH,
    lifecycle_dot,
    png_stamp,
    render_png,
    source_digest,
)
from ordering.management.commands import draw_order_lifecycle
from ordering.models import Order, OrderStatus
from ordering.order_moves import all_moves
from ordering.services.lifecycle import MERCHANT_MOVES
from tests.dashboard.factories import make_order

S = OrderStatus
ACTORS = {"diner", "merchant", "provider", "saga"}


def transition(api, order: Order, to: str):
    return api.post(f"/api/v1/orders/{order.pk}/transition/", {"to": to}, format="json")


@pytest.mark.django_db
def test_a_refused_move_names_the_moves_allowed_from_the_current_status(tenant, menu, merchant_api):
    order = make_order(tenant, menu["pizza"], S.READY)
    response = transition(merchant_api, order, S.COMPLETED)
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "ORDER_STATUS_CONFLICT" and body["order_status"] == S.READY
    assert body["allowed_moves"] == [
        {"to": S.DELIVERING, "by": ["merchant"]},
        {"to": S.CANCELLING, "by": ["diner", "merchant"]},
    ]
    assert "It is READY now and can move to DELIVERING (by merchant)" in body["detail"]


@pytest.mark.django_db
def test_a_final_status_allows_no_move(tenant, menu, merchant_api):
    order = make_order(tenant, menu["pizza"], S.COMPLETED)
    body = transition(merchant_api, order, S.ACCEPTED).json()
    assert (body["order_status"], body["allowed_moves"]) == (S.COMPLETED, [])
    assert "final status" in body["detail"]


@pytest.mark.django_db
def test_allowed_moves_honour_the_fsm_conditions(tenant, menu, api):
    # given an order whose payment was started: paying again is refused, the hint knows why
    order = make_order(tenant, menu["pizza"], S.PAYING)
    body = api.post(f"/api/v1/orders/{order.pk}/pay/").json()
    assert body["order_status"] == S.PAYING
    assert [m["to"] for m in body["allowed_moves"]] == [S.PAID, S.CANCELLED]


def test_every_move_says_who_makes_it():
    moves = all_moves()
    assert {actor for move in moves for actor in move.by} == ACTORS
    merchant_forward = {m.name for m in moves if m.by == ("merchant",)}
    assert merchant_forward == {move(Order()).__name__ for move in MERCHANT_MOVES.values()}


def test_the_committed_diagram_source_is_the_one_the_transitions_draw():
    assert DOT_PATH.read_text() == lifecycle_dot(), (
        "docs/order-lifecycle.dot is stale: run `manage.py draw_order_lifecycle`"
    )


def test_the_committed_png_was_drawn_from_that_source():
    assert png_stamp(PNG_PATH.read_bytes()) == source_digest(lifecycle_dot()), (
        "the lifecycle PNG is stale: run `manage.py draw_order_lifecycle`"
    )


def test_the_check_command_fails_on_a_stale_diagram(tmp_path, monkeypatch):
    stale = tmp_path / "order-lifecycle.dot"
    stale.write_text(lifecycle_dot().replace("(saga)", "(staff)"))
    monkeypatch.setattr(draw_order_lifecycle, "DOT_PATH", stale)
    with pytest.raises(CommandError, match="stale"):
        call_command("draw_order_lifecycle", "--check")


def chunks(png: bytes) -> list[tuple[bytes, bool]]:
    """(type, CRC correct) of each chunk of a PNG."""
    found, position = [], 8
    while position < len(png):
        (length,) = struct.unpack(">I", png[position : position + 4])
        kind_and_data = png[position + 4 : position + 8 + length]
        (crc,) = struct.unpack(">I", png[position + 8 + length : position + 12 + length])
        found.append((kind_and_data[:4], zlib.crc32(kind_and_data) == crc))
        position += 12 + length
    return found


@pytest.mark.skipif(
    shutil.which("dot") is None, reason="Graphviz's dot is missing (apt-get install graphviz)"
)
def test_rendering_stamps_the_png_with_its_source():
    dot = lifecycle_dot()
    png = render_png(dot)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and png_stamp(png) == source_digest(dot)
    found = chunks(png)
    assert all(valid for _, valid in found)  # the stamp keeps the file a valid PNG
    assert [kind for kind, _ in found][-2:] == [b"tEXt", b"IEND"]

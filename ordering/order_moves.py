"""The order lifecycle as data, read from the FSM itself: which moves exist, who may make them.

One source for three readers: the 409 ``ORDER_STATUS_CONFLICT`` answer names the moves allowed
from the order's current status (:func:`allowed_moves`), and the lifecycle diagram in the README
and on the dashboard is drawn from :func:`all_moves` (``ordering/lifecycle_diagram.py``).
A transition added to ``ordering/models/orders.py`` shows up in all of them, and a test fails
until the committed diagram is redrawn.
"""

from __future__ import annotations

from dataclasses import dataclass

from ordering.models import Order, OrderStatus

S = OrderStatus


@dataclass(frozen=True)
class Move:
    name: str  # the FSM method
    sources: tuple[str, ...]
    target: str
    by: tuple[str, ...]

    def as_hint(self) -> dict[str, object]:
        return {"to": self.target, "by": list(self.by)}


def all_moves() -> list[Move]:
    """Every transition of ``Order.status``, in lifecycle order (by first source, then
    target)."""
    field = Order._meta.get_field("status")
    moves: dict[str, Move] = {}
    for transition in field.get_all_transitions(Order):
        known = moves.get(transition.name)
        sources = (*known.sources, transition.source) if known else (transition.source,)
        moves[transition.name] = Move(
            name=transition.name,
            sources=tuple(s for s in S.values if s in sources),
            target=transition.target,
            by=tuple(transition.custom["by"]),
        )
    rank = {status: i for i, status in enumerate(S.values)}
    return sorted(moves.values(), key=lambda m: (rank[m.sources[0]], rank[m.target]))


def allowed_moves(order: Order) -> list[Move]:
    """The moves the order allows right now, conditions included (e.g. CREATED → PAYING only
    while no payment is attached), in lifecycle order of their targets."""
    available = {t.name for t in order.get_available_status_transitions()}
    moves = [move for move in all_moves() if move.name in available]
    return sorted(moves, key=lambda m: S.values.index(m.target))


def conflict_hint(status: str, moves: list[Move]) -> str:
    """One sentence for a refused move: the order's status now, and where it can go instead."""
    if not moves:
        return f"It is {status} now, a final status: no move is allowed."
    options = " or ".join(f"{m.target} (by {' or '.join(m.by)})" for m in moves)
    return f"It is {status} now and can move to {options}."

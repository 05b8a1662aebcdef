"""The cursor of the order list: a place between two orders, in the list's own order.

The list is newest first by ``(created_at, id)``, which is unique (the id is), so a place is an
order's ``created_at`` and id: a page reads the orders after it (older) or before it (newer).
Orders placed or moved while a client scrolls do not shift the pages it has not read yet, as
page numbers did (an order placed between two reads of ``?page=`` pushed the last order of
one page onto the next, shown twice; a filter's order leaving it pulled one back, never shown).

The cursor is opaque to clients: URL-safe base64 of ``<a|b>.<microseconds since the epoch>.<id>``.
It names a place, not a permission: the list a request reads is always the caller's own, so a
cursor edited by hand can only land elsewhere in that list. Anything else is refused as
:class:`CursorInvalid` (400 ``CURSOR_INVALID``), never read.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ordering.error_codes import OrderingErrorCode
from ordering.errors import OrderingError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# a cursor's text: direction, microseconds (a time in years 1970..9999 fits 18 digits), the id
_TEXT = re.compile(r"([ab])\.([0-9]{1,18})\.([1-9][0-9]{0,18})")
_LONGEST = 56  # characters of an encoded cursor: base64 of at most 40 bytes of text
_BIGINT = 2**63 - 1


class CursorInvalid(OrderingError):
    def __init__(self) -> None:
        super().__init__(
            OrderingErrorCode.CURSOR_INVALID,
            "cursor is not one this list gave: follow the next or previous link of an answer, "
            "or leave cursor out for the newest orders",
        )


@dataclass(frozen=True)
class Cursor:
    """A place in the list: just after (``backwards`` False: the older orders follow) or just
    before (True: the newer orders) the order of ``created_at`` and ``order_id``."""

    created_at: datetime
    order_id: int
    backwards: bool = False

    def encode(self) -> str:
        micros = (self.created_at - EPOCH) // timedelta(microseconds=1)
        text = f"{'b' if self.backwards else 'a'}.{micros}.{self.order_id}"
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, value: str) -> Cursor:
        """The cursor ``value`` encodes; :class:`CursorInvalid` for anything else."""
        if not 0 < len(value) <= _LONGEST:
            raise CursorInvalid()
        try:
            text = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode("ascii")
        except (binascii.Error, ValueError):  # not base64, or not ASCII text
            raise CursorInvalid() from None
        match = _TEXT.fullmatch(text)
        if match is None or int(match[3]) > _BIGINT:
            raise CursorInvalid()
        try:
            created_at = EPOCH + timedelta(microseconds=int(match[2]))
        except OverflowError:  # past the calendar's end
            raise CursorInvalid() from None
        return cls(created_at=created_at, order_id=int(match[3]), backwards=match[1] == "b")

"""Small value types shared by the idempotency stores and their callers.

Pure Python on purpose: the Redis store, the in-process cache and the database layer all
exchange these, and none of them should need Django to do so.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["ClaimResult", "Outcome", "StoredResponse"]


class Outcome(StrEnum):
    """What a claim on an idempotency key found.

    ``MISMATCH`` has the value ``"REUSED"`` because that is the word audits, metrics and the
    HTTP error code (``IDEMPOTENCY_KEY_REUSED``) use; the member name says what happened.
    """

    MISS = "MISS"
    HIT = "HIT"
    IN_PROGRESS = "IN_PROGRESS"
    MISMATCH = "REUSED"


# Serialised form: MAGIC, then a 4-byte big-endian length of a JSON header, the header
# ({"s": status, "h": [[name, value], ...], "p": pointer when set}), then the body's exact
# bytes. The magic carries a format version so a later layout can be told apart from this
# one during a rolling deploy.
_MAGIC = b"SR\x01"
_LEN = struct.Struct(">I")


@dataclass(frozen=True)
class StoredResponse:
    """A finished response as it is replayed: status, allow-listed headers, exact body bytes.

    ``headers`` is normalised to a tuple of ``(str, str)`` pairs so instances are hashable and
    a round trip through :meth:`to_bytes`/:meth:`from_bytes` compares equal.
    """

    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    pointer: str = ""
    """Set instead of ``body`` when the body was over the size cap: the URL of the created
    resource, which a replay renders afresh."""

    def __post_init__(self) -> None:
        if isinstance(self.status, bool) or not isinstance(self.status, int):
            raise TypeError("status must be an int")
        if not 100 <= self.status <= 999:
            raise ValueError(f"status out of range: {self.status}")
        headers = tuple((name, value) for name, value in self.headers)
        if not all(isinstance(name, str) and isinstance(value, str) for name, value in headers):
            raise TypeError("header names and values must be str")
        object.__setattr__(self, "headers", headers)
        if not isinstance(self.body, bytes):
            object.__setattr__(self, "body", bytes(self.body))

    @property
    def location(self) -> str:
        """The ``Location`` header ("" when none): the resource an audit of its replay names."""
        return next((v for k, v in self.headers if k.lower() == "location"), "")

    def to_bytes(self) -> bytes:
        """Serialise compactly; the body is appended raw so binary content costs nothing extra.

        ``ensure_ascii`` keeps the header valid for any ``str`` (even lone surrogates), so
        the round trip is exact whatever the caller put in a header value.
        """
        header = json.dumps(
            {"s": self.status, "h": [list(pair) for pair in self.headers]}
            | ({"p": self.pointer} if self.pointer else {}),
            separators=(",", ":"),
            ensure_ascii=True,
        ).encode("ascii")
        return b"".join((_MAGIC, _LEN.pack(len(header)), header, self.body))

    @property
    def size(self) -> int:
        """Bytes of the serialised form: what Redis, the database and the local cache keep."""
        return len(self.to_bytes())

    @classmethod
    def from_bytes(cls, raw: bytes) -> StoredResponse:
        """Parse what :meth:`to_bytes` wrote; ``ValueError`` on anything else (never guess)."""
        raw = bytes(raw)
        start = len(_MAGIC) + _LEN.size
        if len(raw) < start or not raw.startswith(_MAGIC):
            raise ValueError("not a serialised StoredResponse")
        (header_len,) = _LEN.unpack_from(raw, len(_MAGIC))
        if start + header_len > len(raw):
            raise ValueError("truncated StoredResponse header")
        try:
            header = json.loads(raw[start : start + header_len].decode("ascii"))
            status = header["s"]
            headers = tuple((name, value) for name, value in header["h"])
            pointer = header.get("p", "")
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"malformed StoredResponse header: {exc}") from exc
        return cls(status=status, headers=headers, body=raw[start + header_len :], pointer=pointer)


@dataclass(frozen=True)
class ClaimResult:
    """The answer of one claim; which optional fields are set depends on ``outcome``.

    - MISS: nothing else; the caller now owns the key until the lease runs out.
    - HIT: ``response``, ``stored_fingerprint`` and ``fingerprint_version``; ``audited`` when
      the claim appended the replay's audit itself (``claim_audit.lua``).
    - IN_PROGRESS: ``retry_after_ms`` (the remaining lease, a fair ``Retry-After`` hint).
    - MISMATCH: ``stored_fingerprint``, ``fingerprint_version`` and, when the first request
      recorded them, ``stored_field_hashes`` so the audit can name the differing fields.
    """

    outcome: Outcome
    response: StoredResponse | None = None
    stored_fingerprint: str | None = None
    fingerprint_version: int | None = None
    retry_after_ms: int | None = None
    stored_field_hashes: dict[str, str] | None = None
    audited: bool = False

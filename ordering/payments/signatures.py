"""Webhook authentication: HMAC-SHA256 over ``"<timestamp>." + raw body``, per-provider secret.

Why this shape: the MAC covers the exact bytes received (re-serialised JSON could differ), and
the timestamp it covers bounds how long a captured request can be replayed (5 minutes by
default, ``settings.PAYMENT_CALLBACK_TOLERANCE_SECONDS``). Comparison is constant-time
(:func:`hmac.compare_digest`) so response timing leaks nothing about the expected MAC.

Headers: ``X-Provider-Timestamp: <unix seconds>`` and ``X-Provider-Signature: v1=<hex>``
(several ``v1=`` values separated by commas are accepted, for senders rotating their secret).
The hex is read in either case: SDKs write it in upper case too (Java's ``printHexBinary``,
.NET's ``Convert.ToHexString``), the same MAC; we sign in lower case.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Sequence

from ordering.payments.error_codes import CallbackRejected, PaymentErrorCode

PROVIDER_HEADER = "X-Provider"
TIMESTAMP_HEADER = "X-Provider-Timestamp"
SIGNATURE_HEADER = "X-Provider-Signature"
SCHEME = "v1"
# Unix seconds have 10 digits until the year 2286; a longer number is no timestamp (the API
# schema declares this bound, so a provider's integration generated from it stays within it)
LONGEST_TIMESTAMP = 12
# The timestamp exactly as we write it, ``str(int)``: the MAC covers these characters, so
# a sign, underscores, leading zeros or non-ASCII digits (all of which Python's ``int()``
# reads) would verify text that was never signed
_TIMESTAMP = re.compile(rf"0|[1-9][0-9]{{0,{LONGEST_TIMESTAMP - 1}}}")


def sign(*, secret: str, timestamp: int, body: bytes) -> str:
    """The signature header value for ``body`` sent at ``timestamp``."""
    return f"{SCHEME}={_mac(secret, timestamp, body)}"


def verify(
    *,
    secrets: Sequence[str],
    timestamp: str | None,
    signature: str | None,
    body: bytes,
    tolerance_seconds: int,
    now: float | None = None,
) -> int:
    """The verified timestamp, or :class:`CallbackRejected`.

    A missing or wrong signature is 401 ``PAYMENT_SIGNATURE_INVALID``; a malformed timestamp is
    400 ``PAYMENT_TIMESTAMP_INVALID``; a correctly signed request outside the tolerance window (a
    replay) is 400 ``PAYMENT_TIMESTAMP_STALE``. The signature is checked before the window so
    that a forged request always gets the same answer.
    """
    if not signature or not timestamp:
        raise _unauthentic(f"{SIGNATURE_HEADER} and {TIMESTAMP_HEADER} are required")
    if not _TIMESTAMP.fullmatch(timestamp.strip()):
        raise CallbackRejected(
            PaymentErrorCode.PAYMENT_TIMESTAMP_INVALID,
            f"{TIMESTAMP_HEADER} must be Unix seconds in decimal digits",
        )
    sent_at = int(timestamp.strip())
    # Lower-cased before the comparison: the case of the offered hex is the sender's, and
    # says nothing of the expected MAC, so the comparison stays constant-time.
    offered = [
        value.strip()[len(SCHEME) + 1 :].lower()
        for value in signature.split(",")
        if value.strip().startswith(f"{SCHEME}=")
    ]
    expected = [_mac(secret, sent_at, body) for secret in secrets]
    # Every pair is compared (no early exit), each in constant time.
    matched = False
    for candidate in offered:
        for mac in expected:
            matched |= hmac.compare_digest(candidate.encode(), mac.encode())
    if not matched:
        raise _unauthentic("Signature mismatch")
    skew = abs((time.time() if now is None else now) - sent_at)
    if skew > tolerance_seconds:
        raise CallbackRejected(
            PaymentErrorCode.PAYMENT_TIMESTAMP_STALE,
            f"Timestamp is {int(skew)} s away from now (tolerance {tolerance_seconds} s)",
        )
    return sent_at


def _mac(secret: str, timestamp: int, body: bytes) -> str:
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def _unauthentic(detail: str) -> CallbackRejected:
    """401 ``PAYMENT_SIGNATURE_INVALID``, whose challenge names the provider's signature, not
    the API's credentials (Api-Key, Bearer), which this route does not take."""
    return CallbackRejected(
        PaymentErrorCode.PAYMENT_SIGNATURE_INVALID,
        detail,
        headers={"WWW-Authenticate": f'{SIGNATURE_HEADER} realm="payment-callbacks"'},
    )

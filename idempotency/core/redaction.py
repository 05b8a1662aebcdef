"""Redaction: values a stored reply must never keep (a diner's phone, an address, a card hint).

An endpoint declares JSON paths (``@idempotent(redact=("diner.phone", "delivery.address"))``)
and a tenant may add its own (the ``REDACT_FOR_TENANT`` hook). The first answer goes to the
client whole; the reply kept for replays — in Redis, in the database record and in every
process's local cache, which all hold the one :class:`~idempotency.core.outcomes.StoredResponse`
built by :func:`idempotency.core.replies.to_stored` — has ``null`` at each of those paths, and
a header ``Idempotency-Redacted`` that names the paths it blanked. A replay answers that
redacted body with that header, byte for byte the same on every replay: the client already
knows what it sent, and reads the current resource (``GET`` its ``Location``) if it needs the
values back.

Path syntax: object keys joined by dots (``delivery.address``). A list met on the way is
walked element by element (``lines.note`` blanks the note of every line). A path that is
absent, or whose value is ``null`` or ``""`` (nothing to hide), is left alone and not named in
the header, so a reply with nothing personal in it replays exactly as it was first sent.

A body that is not JSON cannot be searched for the values, so when redaction applies to it the
body is not kept at all (:mod:`idempotency.core.replies` keeps a pointer or a marker instead).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

REDACTED_HEADER = "Idempotency-Redacted"
PATH_RE = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
_JSON_TYPE = re.compile(r"^application/([\w.+-]+\+)?json\s*(;|$)", re.IGNORECASE)


class NotJson(Exception):
    """The body is not a JSON document: redaction cannot find the values in it."""


def check_paths(paths: Iterable[str]) -> tuple[str, ...]:
    """``paths`` as a tuple, each checked against the syntax above (``ValueError`` names the
    first bad one), duplicates dropped, in their first order."""
    if isinstance(paths, str):
        # ("diner.phone") without its comma: the letters d, i, n… would be the paths
        raise ValueError(
            f"redact must be a list of paths, not the string {paths!r} "
            f"(a one-path tuple needs its comma: ({paths!r},))"
        )
    checked: list[str] = []
    for path in paths:
        if not isinstance(path, str) or not PATH_RE.fullmatch(path):
            raise ValueError(
                f"{path!r} is not a redaction path (object keys joined by dots, e.g. diner.phone)"
            )
        if path not in checked:
            checked.append(path)
    return tuple(checked)


def redact_body(body: bytes, content_type: str, paths: tuple[str, ...]) -> tuple[bytes, list[str]]:
    """``body`` with ``null`` at every path that holds a value, and the paths that did.

    Nothing found: the body comes back as the very same bytes. Otherwise it is written again as
    compact JSON (as DRF renders it: no spaces, UTF-8, U+2028/9 escaped), keys in their order.
    Raises :class:`NotJson` for a body that is not JSON."""
    if not _JSON_TYPE.match(content_type or ""):
        raise NotJson(content_type)
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise NotJson(str(exc)) from exc
    found = [path for path in paths if _blank(document, path.split("."))]
    if not found:
        return body, []
    rendered = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    # as DRF does: these two are valid JSON but end a line in JavaScript
    rendered = rendered.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return rendered.encode("utf-8", "surrogatepass"), found


def _blank(node: Any, keys: list[str]) -> bool:
    """Set the value at ``keys`` below ``node`` to None; whether any value was there."""
    if isinstance(node, list):
        return any([_blank(item, keys) for item in node])  # a list: every element, no shortcut
    if not isinstance(node, dict) or keys[0] not in node:
        return False
    if len(keys) > 1:
        return _blank(node[keys[0]], keys[1:])
    if node[keys[0]] in (None, ""):
        return False
    node[keys[0]] = None
    return True

"""Changing one value of a dashboard user's session when other tabs may change it too.

The tabs of one browser share its session, and Django writes the whole session back as a
request that changed it ends: a tab whose request read the session before another tab changed
a value wrote its older copy of that value back over it (a key issued in another tab, never
shown to anyone; a restaurant switched in another tab, switched back). :func:`change_value`
locks the session's row, reads the session again, changes the one value on what is stored now
and writes it at once; the request then holds what is stored and leaves it alone as it ends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore
from django.db import transaction
from django.http import HttpRequest

T = TypeVar("T")
_ABSENT: Any = object()


def change_value(request: HttpRequest, name: str, change: Callable[[Any], tuple[Any, T]]) -> T:
    """``change`` given the session's value ``name`` as stored now (None when absent), and
    returning the value to keep (None: none) and the caller's result.

    Call it before any other change of the session in the same request: the request's copy of
    the session becomes what is stored. A session kept elsewhere than in the database (no row
    to lock) is changed as the request read it, and one ended meanwhile stays ended."""
    session = request.session
    locked = isinstance(session, DatabaseSessionStore) and session.session_key is not None
    with transaction.atomic():
        row = (
            session.model.objects.select_for_update()
            .filter(session_key=session.session_key)
            .first()
            if locked
            else None
        )
        if row is not None:
            stored = session.decode(row.session_data)
            session.clear()
            session.update(stored)
        kept, result = change(session.get(name))
        if kept is None:
            session.pop(name, None)
        else:
            session[name] = kept
        if row is not None:
            session.save()
            session.modified = False  # as stored: written again at the end, it would undo others
    return result

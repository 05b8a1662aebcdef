"""A request made while the database accepts connections and never answers.

A hung PostgreSQL, a stalled pooler or an address a failover left half-open completes the TCP
handshake and then says nothing. :func:`answer_with_a_silent_database` points this process's
connection at such a listener, makes the request in a thread, and reports whether it answered
within ``within`` seconds (a generous bound: what is under test is the product's own, shorter
limit), then puts the connection back.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

from django.db import connection
from django.http import HttpResponse


def answer_with_a_silent_database(
    request: Callable[[], HttpResponse], *, within: float
) -> HttpResponse | None:
    """``request()``'s answer, or None when it was still waiting after ``within`` seconds."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # the kernel completes the handshake; nobody ever answers
    port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = str(silent.getsockname()[1])
    answers: list[HttpResponse] = []
    waiting = threading.Thread(target=lambda: answers.append(request()))
    try:
        waiting.start()
        waiting.join(timeout=within)
        answered_in_time = not waiting.is_alive()
    finally:
        silent.close()  # lets a hanging request go
        waiting.join(timeout=within * 4)
        connection.close()
        connection.settings_dict["PORT"] = port
    return answers[0] if answered_in_time else None

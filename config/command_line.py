"""``manage.py``'s entry point: an operator's command while PostgreSQL is down ends in one line.

Every command that reads the database (``dead_letters``, ``purge_expired_data``,
``offboard_tenant``, ``migrate``…) died with psycopg's traceback when PostgreSQL refused
connections, was silent past ``DB_CONNECT_TIMEOUT`` or was restarting: pages of Python for an
outage the operator can do nothing about but wait. Such a failure is now one line on stderr
naming it, and exit status 1, as a ``CommandError`` is; what the run committed before the
outage stays committed, and the commands the docs name are safe to run again once it answers.

Output piped to a reader that stopped (``| head -1``) ended the same way, in a
``BrokenPipeError`` traceback: that is one line too, exit status 1, and what the command did
before stays done.

Only a connection-level failure qualifies (:func:`config.database_unavailable
.is_database_unavailable`, as for the web's 503): any other database error keeps its
traceback, a bug being one; ``--traceback`` keeps it for an outage too.

A setting that stops the server (``ImproperlyConfigured``) stopped every command in a traceback
through Django's settings machinery, the reason at its end: that reason is the one line now,
exit status 1 (``--traceback`` keeps the traceback).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from django.core.exceptions import ImproperlyConfigured
from django.core.management import execute_from_command_line
from django.db import OperationalError


def main(argv: Sequence[str]) -> None:
    """Run the command in ``argv``; exit 1 with one line when PostgreSQL cannot be reached."""
    try:
        execute_from_command_line(list(argv))
        sys.stdout.flush()  # here, not at exit, where a closed pipe is only a warning
    except BrokenPipeError:
        # Python's documented recipe: point stdout at devnull, so that the interpreter's own
        # flush at exit does not fail again on what is still buffered
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.stderr.write(
            "BrokenPipe: the output was closed before the command finished writing it; "
            "what it did stays done\n"
        )
        sys.exit(1)
    except ImproperlyConfigured as exc:
        if "--traceback" in argv:
            raise
        sys.stderr.write(f"ImproperlyConfigured: {exc}\n")
        sys.exit(1)
    except OperationalError as exc:
        from config.database_unavailable import is_database_unavailable

        if "--traceback" in argv or not is_database_unavailable(exc):
            raise
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        sys.stderr.write(
            f"DatabaseUnavailable: PostgreSQL did not answer ({first_line}); the command stopped: "
            "what it committed stays, run it again once the database answers\n"
        )
        sys.exit(1)

"""Who a command acts for: ``--by``, who asked for an erasure or an offboarding, as the commands
that take it read it, and the operator running a command when no one is named."""

from __future__ import annotations

import argparse
import getpass
import os

from ordering.models import DinerErasure

# the erasure log's and the offboarding job's column alike
REQUESTER_LIMIT = DinerErasure._meta.get_field("requested_by").max_length


def requester(text: str) -> str:
    """The name as given, kept whole: one longer than the column keeps is refused, where it was
    cut without a word and the record named someone other than given."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must name who asked")
    if len(text) > REQUESTER_LIMIT:
        raise argparse.ArgumentTypeError(f"must be at most {REQUESTER_LIMIT} characters")
    return text


def operator() -> str:
    """``cli:`` and the login name of whoever runs the command, or of its user id when the
    system has no name for it: a container running as an arbitrary user id, with no passwd
    entry and no ``USER`` in its environment, where ``getpass.getuser()`` raised and the
    command died with a traceback before doing anything."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return f"cli:uid-{os.getuid()}"

"""``--by``, who asked for an erasure or an offboarding, as the commands that take it read it."""

from __future__ import annotations

import argparse

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

"""Irreversible commands ask the operator at a terminal to type what they act on.

A mistyped argument (another restaurant's slug, another diner's id) or a line recalled from the
shell's history erased data without a word; the dashboard and the admin ask before they do the
same. Only a terminal is asked: a script, cron or ``call_command`` has no one to answer, and its
arguments were written down on purpose; ``--noinput`` (Django's convention) skips the question.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError


def add_noinput(parser: Any, *, skips: str) -> None:
    """Django's ``--noinput``/``--no-input``, stored as ``interactive``."""
    parser.add_argument(
        "--noinput",
        "--no-input",
        action="store_false",
        dest="interactive",
        help=f"Do not ask to type {skips}",
    )


def asks(options: dict[str, Any]) -> bool:
    """Whether to ask: not under ``--noinput``, and only with a terminal to answer."""
    return bool(options["interactive"]) and sys.stdin.isatty()


def confirm_by_typing(
    command: BaseCommand, *, what_goes: str, expected: str, name: str, action: str
) -> None:
    """Write ``what_goes``, then return only once the operator typed ``expected`` (``name``
    says what it is: "the slug", "the diner id"). Anything else, or the input ended (Ctrl-D),
    does nothing: :class:`CommandError`."""
    command.stdout.write(what_goes)
    command.stdout.flush()
    try:
        typed = input(f"Type {name} {expected!r} to {action}: ")
    except EOFError:
        raise CommandError(
            "not confirmed (the input ended); nothing was done: "
            f"run it with --noinput to {action} without asking"
        ) from None
    if typed.strip() != expected:
        raise CommandError(f"{typed.strip()!r} is not {expected!r}; nothing was done")

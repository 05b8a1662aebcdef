"""``manage.py dead_letters [list | requeue ID... | discard ID... --note TEXT]``

Staff's command-line view of dead letters (the admin offers the same actions). ``requeue``
sends the message again with fresh retries; ``discard`` closes the letter and leaves the order
where it is (for when staff handled it by hand), and takes only a ``--note`` of what was done
instead, as the admin's Discard does. Both refuse a letter that is no longer open.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ordering.background.dead_letters import (
    MAX_NOTE_CHARS,
    DeadLetterNotOpen,
    discard_dead_letter,
    requeue_dead_letter,
)
from ordering.management.requester import operator
from ordering.models import DeadLetter

DONE = {"requeue": "requeued", "discard": "discarded"}


class Command(BaseCommand):
    help = "List, requeue or discard dead letters."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "action", choices=["list", "requeue", "discard"], nargs="?", default="list"
        )
        parser.add_argument("ids", nargs="*", type=int)
        parser.add_argument("--all", action="store_true", help="list: include closed letters")
        parser.add_argument("--note", default="", help="discard (required): what was done instead")

    def handle(self, *args: Any, **options: Any) -> None:
        actor = operator()
        if options["action"] == "list":
            letters = DeadLetter.objects.order_by("-created_at")
            if not options["all"]:
                letters = letters.filter(state=DeadLetter.State.OPEN)
            shown = letters[:200]
            for letter in shown:
                self.stdout.write(
                    f"{letter.pk}\t{letter.state}\t{letter.created_at:%Y-%m-%d %H:%M:%S}\t"
                    f"{letter.key}\tattempts={letter.attempts}\t{letter.error[:120]}"
                )
            if not shown:
                self.stdout.write("no dead letters" if options["all"] else "no open dead letters")
            return
        if not options["ids"]:
            raise CommandError(f"{options['action']} needs at least one dead letter id")
        note = options["note"]
        if options["action"] == "discard" and (not note.strip() or len(note) > MAX_NOTE_CHARS):
            # checked before any letter is closed: a discarded refund is never sent
            raise CommandError(
                f"discard needs --note, 1-{MAX_NOTE_CHARS} characters: what was done instead"
            )
        failed = False
        for letter_id in options["ids"]:
            try:
                if options["action"] == "requeue":
                    requeue_dead_letter(dead_letter_id=letter_id, actor=actor)
                else:
                    discard_dead_letter(dead_letter_id=letter_id, actor=actor, note=note)
            except DeadLetterNotOpen as exc:
                failed = True
                self.stderr.write(str(exc))
            else:
                self.stdout.write(f"{letter_id}: {DONE[options['action']]}")
        if failed:
            raise CommandError("some dead letters were not open")

"""``manage.py draw_order_lifecycle [--check]``

Redraw the order lifecycle diagram from the FSM's transitions: ``docs/order-lifecycle.dot`` and
the PNG the README and the dashboard show (needs Graphviz's ``dot``: ``apt-get install
graphviz``). ``--check`` changes nothing and exits 1 when either file is stale.
"""

from __future__ import annotations

import shutil
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ordering.lifecycle_diagram import (
    DOT_PATH,
    PNG_PATH,
    lifecycle_dot,
    png_stamp,
    render_png,
    source_digest,
)


class Command(BaseCommand):
    help = "Draw the order lifecycle diagram (DOT + PNG) from the order FSM."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--check", action="store_true", help="only report staleness")

    def handle(self, *args: Any, check: bool, **options: Any) -> None:
        dot = lifecycle_dot()
        if check:
            stale = [
                str(path)
                for path, fresh in (
                    (DOT_PATH, DOT_PATH.exists() and DOT_PATH.read_text() == dot),
                    (
                        PNG_PATH,
                        PNG_PATH.exists()
                        and png_stamp(PNG_PATH.read_bytes()) == source_digest(dot),
                    ),
                )
                if not fresh
            ]
            if stale:
                raise CommandError(f"stale: {', '.join(stale)}; run manage.py draw_order_lifecycle")
            self.stdout.write("order lifecycle diagram is up to date")
            return
        if shutil.which("dot") is None:
            raise CommandError("Graphviz's dot is missing: apt-get install graphviz")
        DOT_PATH.write_text(dot)
        PNG_PATH.write_bytes(render_png(dot))
        self.stdout.write(f"wrote {DOT_PATH} and {PNG_PATH}")

"""``manage.py export_diner TENANT DINER_ID [--out PATH] [--by NAME]``

Give a diner a copy of the data a restaurant keeps about them (``TENANT`` is the restaurant's
slug): their orders with lines, payments and status history, their sessions, their stored
replies and duplicate-hit audits, as JSON (:mod:`ordering.privacy.diner_export`). To stdout,
or to ``PATH``, a new file readable by its owner only (mode 0600), never one that exists.
Each export is logged (who, when, the diner id as a keyed hash).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ordering.management.requester import operator, requester
from ordering.privacy.diner_export import check_exportable, diner_export_chunks, log_export
from ordering.privacy.diners import NotADinerId, TenantLeaving, check_diner_id
from tenants.models import Tenant


class Command(BaseCommand):
    help = "Export a diner's data (their copy, on request) as JSON."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("tenant", help="The tenant's slug")
        parser.add_argument("diner_id")
        parser.add_argument(
            "--out", help="Write to this new file (mode 0600; an existing file is refused)"
        )
        parser.add_argument(
            "--by", type=requester, help="Who asked (kept in the export log); default: you"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant with slug {options['tenant']!r}")
        diner_id: str = options["diner_id"]
        try:
            check_diner_id(diner_id)
            check_exportable(tenant)
        except (NotADinerId, TenantLeaving) as exc:
            raise CommandError(str(exc)) from None
        out = Path(options["out"]) if options["out"] else None
        target = _create(out) if out else None
        try:
            chunks = diner_export_chunks(tenant, diner_id)
            log_export(
                tenant=tenant,
                diner_id=diner_id,
                requested_by=options["by"] or operator(),
            )
            if target is not None:
                for chunk in chunks:
                    target.write(chunk)
            else:
                self._to_stdout(chunks, own_stdout=options.get("stdout") is None)
        except BaseException:
            if target is not None and out is not None:
                target.close()
                out.unlink(missing_ok=True)  # no half a copy left behind
            raise
        if target is not None and out is not None:
            target.close()
            self.stderr.write(f"wrote {out} (mode 0600)")

    def _to_stdout(self, chunks: Iterator[str], *, own_stdout: bool) -> None:
        """Write the copy to stdout, flushed. A reader that stops early (``| head``) closes the
        pipe: the operator is told the copy it got is cut short, in one line rather than a
        traceback, and the process's own stdout is pointed at ``/dev/null`` so that Python's
        last flush at exit does not raise the same error again."""
        try:
            for chunk in chunks:
                self.stdout.write(chunk, ending="")
            self.stdout.flush()
        except BrokenPipeError:
            if own_stdout:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise CommandError(
                "stdout was closed before the copy was written whole: what was read of it is "
                "cut short (the export is logged); write it with --out PATH instead"
            ) from None


def _create(path: Path) -> Any:
    """``path`` opened for writing, created now with mode 0600: one that exists is refused
    (a copy not handed over yet, or another file) rather than replaced."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise CommandError(f"{path} exists: choose another path (nothing was exported)") from None
    except OSError as exc:
        raise CommandError(f"cannot create {path}: {exc.strerror}") from None
    return os.fdopen(fd, "w", encoding="utf-8")

"""``manage.py check_lua_version NAME VERSION``: run the engine's contract tests against one
Lua script version; only a version that passes can become canary or stable.

The contract tests are the replay, mismatch, crash-window and storm tests (``CONTRACT_TESTS``),
run by pytest in a subprocess with ``IDEMPOTENCY_FORCE_SCRIPTS`` pointing every claim (or
finish, …) at the candidate's source, on a database of their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from idempotency.models import LuaScriptVersion
from idempotency.scripts.versions import record_contract_pass

CONTRACT_TESTS = (
    "tests/flows/test_idempotent_orders.py",
    "tests/flows/test_crash_windows.py",
    "tests/flows/test_storm.py",
)


class Command(BaseCommand):
    help = "Run the idempotency contract tests against a Lua script version."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("name")
        parser.add_argument("version", type=int)
        parser.add_argument("--quick", action="store_true", help="skip the slow live storms")
        parser.add_argument("--author", default="check_lua_version")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            script = LuaScriptVersion.objects.get(name=options["name"], version=options["version"])
        except LuaScriptVersion.DoesNotExist:
            raise CommandError("no such script version") from None
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{script.name}.lua"
            path.write_text(script.source, "utf-8")
            result = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-q",
                    "-x",
                    "-p",
                    "no:cacheprovider",
                    *(["-m", "not slow"] if options["quick"] else []),
                    *CONTRACT_TESTS,
                ],
                cwd=settings.BASE_DIR,
                env=_contract_env(script.name, path),
                capture_output=True,
                text=True,
            )
        self.stdout.write(result.stdout[-3000:])
        if result.returncode != 0:
            raise CommandError(f"{script} fails the contract tests")
        record_contract_pass(script, author=options["author"])
        self.stdout.write(f"{script} passed the contract tests")


def _contract_env(name: str, path: Path) -> dict[str, str]:
    """The current environment, with the candidate forced and a database of the run's own
    (pytest-django creates ``test_<name>`` from it; it must never be a database in use)."""
    db = settings.DATABASES["default"]
    url = (
        f"postgres://{db.get('USER') or 'postgres'}@{db.get('HOST') or '127.0.0.1'}:"
        f"{db.get('PORT') or 5432}/{db['NAME']}_contract"
    )
    return {
        **os.environ,
        "DATABASE_URL": url,
        "IDEMPOTENCY_FORCE_SCRIPTS": json.dumps({name: str(path)}),
    }

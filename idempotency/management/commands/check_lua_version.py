"""``manage.py check_lua_version NAME VERSION``: the gate a Lua script version must pass before
it can become canary or stable.

It runs the engine's contract suite (``idempotency.tests.contract``, shipped with the engine:
storms, replays, mismatches, scopes, crash windows, lost replies, database-only, tokens, rate
limit, breaker) in a pytest subprocess, with the candidate as its script and the *live* version
of every other versioned script (the stable one, else the shipped file), so a candidate is
judged with the scripts it will actually run beside.

The run is isolated (:mod:`idempotency.management.sandbox`): an ephemeral ``redis-server`` on a
free loopback port and a throwaway database on the configured PostgreSQL server, both removed
afterwards. The configured Redis and database are never touched; the only write to them is the
recorded pass on the version's row. Where it cannot isolate the run, the command refuses.

Only a full run records a pass. ``--quick`` leaves out the slow storms, for iterating on a
script, and records nothing: a promotion needs a full pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from idempotency.management.sandbox import CannotIsolate, ephemeral_redis, throwaway_database
from idempotency.models import LuaScriptVersion
from idempotency.scripts.versions import KNOWN_SCRIPTS, record_contract_pass, shipped_source

CONTRACT_SUITE = "idempotency.tests.contract"
CONTRACT_SETTINGS = "idempotency.tests.settings"
RUN_TIMEOUT_SECONDS = 1800


class Command(BaseCommand):
    help = "Run the engine's contract suite against a Lua script version, in a sandbox."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("name")
        parser.add_argument("version", type=int)
        parser.add_argument(
            "--quick",
            action="store_true",
            help="leave out the slow storms; a quick pass is not recorded and cannot gate",
        )
        parser.add_argument("--author", default="check_lua_version")
        parser.add_argument(
            "--redis-server", default="redis-server", help="the redis-server binary to start"
        )
        parser.add_argument(
            "--database",
            default="default",
            help="alias of the database whose server hosts the throwaway database",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            script = LuaScriptVersion.objects.get(name=options["name"], version=options["version"])
        except LuaScriptVersion.DoesNotExist:
            raise CommandError("no such script version") from None
        missing = [m for m in ("pytest", "pytest_django") if find_spec(m) is None]
        if missing:
            raise CommandError(
                f"{' and '.join(missing)} not installed: the contract suite needs them "
                "(pip install 'django-idempotency-engine[contract]')"
            )
        try:
            result = self._run_suite(script, options)
        except CannotIsolate as exc:
            raise CommandError(f"refusing to run the contract suite: {exc}") from exc
        self.stdout.write(result.stdout[-3000:])
        if result.returncode != 0:
            self.stdout.write(result.stderr[-2000:])
            raise CommandError(f"{script} fails the contract tests")
        if options["quick"]:
            self.stdout.write(
                f"{script} passed the quick contract run; not recorded: a promotion needs a "
                "full run (without --quick)"
            )
            return
        record_contract_pass(script, author=options["author"])
        self.stdout.write(f"{script} passed the contract tests")

    def _run_suite(
        self, script: LuaScriptVersion, options: dict[str, Any]
    ) -> subprocess.CompletedProcess[str]:
        with (
            tempfile.TemporaryDirectory(prefix="idem-contract-") as workdir,
            ephemeral_redis(options["redis_server"]) as redis_server,
            throwaway_database(options["database"]) as database_url,
        ):
            forced = _script_files(script, Path(workdir))
            self.stdout.write(
                f"contract suite on redis-server 127.0.0.1:{redis_server.port} and database "
                f"{database_url.rsplit('/', 1)[-1]}; scripts: "
                + ", ".join(f"{name} {label}" for name, (label, _) in forced.items())
            )
            env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
            env.update(
                DJANGO_SETTINGS_MODULE=CONTRACT_SETTINGS,
                IDEMPOTENCY_TEST_DATABASE_URL=database_url,
                IDEMPOTENCY_TEST_DATABASE_IS_THROWAWAY="1",
                IDEMPOTENCY_TEST_REDIS_URL=redis_server.url,
                IDEMPOTENCY_FORCE_SCRIPTS=json.dumps(
                    {name: str(path) for name, (_, path) in forced.items()}
                ),
            )
            command = [
                sys.executable,
                *("-m", "pytest", "--pyargs", CONTRACT_SUITE, "-q", "-x"),
                *("-p", "no:cacheprovider", "--reuse-db", "--ds", CONTRACT_SETTINGS),
                *(["-m", "not slow"] if options["quick"] else []),
            ]
            try:
                return subprocess.run(
                    command,
                    cwd=workdir,  # nothing of the host project's tree on the path
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=RUN_TIMEOUT_SECONDS,
                )
            except subprocess.TimeoutExpired as exc:
                raise CommandError(
                    f"the contract suite did not finish within {RUN_TIMEOUT_SECONDS} s"
                ) from exc


def _script_files(candidate: LuaScriptVersion, workdir: Path) -> dict[str, tuple[str, Path]]:
    """Every versioned script as the run uses it: the candidate for its name, the live
    version for the others. Returns name -> (which version, file)."""
    files: dict[str, tuple[str, Path]] = {}
    for name in KNOWN_SCRIPTS:
        if name == candidate.name:
            label, source = f"v{candidate.version} (candidate)", candidate.source
        else:
            stable = LuaScriptVersion.objects.filter(
                name=name, state=LuaScriptVersion.State.STABLE
            ).first()
            label, source = (
                (f"v{stable.version} (stable)", stable.source)
                if stable is not None
                else ("shipped", shipped_source(name))
            )
        path = workdir / f"{name}.lua"
        path.write_text(source, "utf-8")
        files[name] = (label, path)
    return files

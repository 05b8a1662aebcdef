"""The mutation check's commands, as ``docs/mutation-testing.md`` writes them, start without
any variable set: the database they need defaults to ``make test``'s. (Running mutants takes
tens of minutes; these tests stop the script at its first module, which is no module.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_documented_commands_need_no_database_url_of_their_own(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEST_", "MUTATION_"))}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "mutation_check.sh"), "no_such_module"],
        env={**env, "PY": sys.executable, "MUTATION_OUT": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    # it went as far as the module list, where only the module's name was wrong
    assert done.returncode != 0
    assert "TEST_DATABASE_URL" not in done.stderr, done.stderr
    assert "unknown module no_such_module" in done.stderr, done.stderr

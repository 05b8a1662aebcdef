"""The import contracts of ``pyproject.toml`` (drawn in docs/architecture.md) hold.

``lint-imports`` builds the import graph of every package and fails on a forbidden import:
``idempotency`` importing the product, ``tenants`` importing ``ordering``, or a lower layer of
the engine or of ``ordering.background`` importing a higher one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lint_imports(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe, "import-linter is a dev dependency: pip install -e '.[dev]'"
    return subprocess.run(
        [exe, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_every_import_contract_is_kept() -> None:
    result = lint_imports()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_forbidden_import_breaks_a_contract(tmp_path: Path) -> None:
    # given a copy of the packages where the engine imports the product
    for package in ("idempotency", "tenants", "ordering", "config"):
        shutil.copytree(ROOT / package, tmp_path / package)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    keys = tmp_path / "idempotency" / "core" / "keys.py"
    keys.write_text(keys.read_text() + "\nfrom ordering.models import Order  # noqa\n")
    # when the contracts are checked, then that import is named
    result = lint_imports(cwd=tmp_path)
    assert result.returncode != 0
    assert "idempotency.core.keys -> ordering.models" in result.stdout

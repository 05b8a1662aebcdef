"""The engine as a library: what it declares, what it ships, what a host gets.

The standalone checks run when ``scripts/test_engine.sh`` runs this suite from the engine's
wheel in a virtualenv of its own (``IDEMPOTENCY_STANDALONE=1``).
"""

from __future__ import annotations

import os
import sys
import sysconfig
from importlib import metadata
from importlib.util import find_spec
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

import idempotency

DISTRIBUTION = "django-idempotency-engine"
standalone = pytest.mark.skipif(
    os.environ.get("IDEMPOTENCY_STANDALONE") != "1", reason="only in the engine's own virtualenv"
)


def test_the_distribution_declares_only_what_the_engine_imports():
    required = {
        r.split(";")[0].split("<")[0].split(">")[0] for r in metadata.requires(DISTRIBUTION)
    }
    assert required == {
        "Django",
        "djangorestframework",
        "redis",
        "prometheus-client",  # extra "metrics"
        "drf-spectacular",  # extra "openapi"
        "pytest",  # extra "contract"
        "pytest-django",
    }
    extras = {
        r.split(";")[0].split("<")[0].split(">")[0]: r.split("extra == ")[-1].strip('"')
        for r in metadata.requires(DISTRIBUTION)
        if "extra ==" in r
    }
    assert extras == {
        "prometheus-client": "metrics",
        "drf-spectacular": "openapi",
        "pytest": "contract",
        "pytest-django": "contract",
    }


@standalone
def test_installed_alone_from_the_wheel_with_no_product_code_and_no_extras():
    site_packages = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert Path(idempotency.__file__).resolve().is_relative_to(site_packages)
    for product_package in ("ordering", "tenants", "config"):
        assert find_spec(product_package) is None, product_package
    # the extras are not installed: the engine imports and runs without them
    assert find_spec("prometheus_client") is None and find_spec("drf_spectacular") is None
    for name in ("celery", "django_fsm", "gunicorn", "django_redis"):
        assert find_spec(name) is None, name


def test_the_installed_version_is_importable():
    """(red: ``AttributeError: module 'idempotency' has no attribute '__version__'``)"""
    from idempotency import __version__

    assert __version__ == metadata.version(DISTRIBUTION) and __version__[0].isdigit()


def test_the_wheel_ships_the_lua_scripts_templates_readme_and_type_marker():
    package = Path(idempotency.__file__).parent
    # PEP 561: without the marker a host's type checker ignores the engine's annotations
    # ("module is installed, but missing library stubs or py.typed marker")
    assert (package / "py.typed").is_file()
    assert {p.name for p in (package / "scripts" / "lua").glob("*.lua")} >= {
        "claim.lua",
        "finish.lua",
        "release.lua",
    }
    assert (package / "templates" / "admin" / "idempotency").is_dir()
    assert (package / "README.md").is_file()


@pytest.mark.django_db
def test_a_host_on_autofield_gets_no_pending_migration_inside_the_engine():
    # the test project's DEFAULT_AUTO_FIELD is AutoField; the engine's apps name their own
    out = StringIO()
    call_command("makemigrations", "idempotency", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_no_module_at_the_top_of_the_engine_hides_one_of_python_s_own():
    # Any `python -m …` run inside the engine's folder (`python -m build`, `python -m pytest`)
    # puts that folder first on the import path, where a `selectors.py` of ours hid the standard
    # library's module that asyncio and subprocess import: the command failed before it began.
    folder = Path(idempotency.__file__).parent
    names = {path.stem for path in folder.glob("*.py")} | {
        path.name for path in folder.iterdir() if (path / "__init__.py").exists()
    }
    assert not names & sys.stdlib_module_names

"""Run a snippet of Python in a child process whose Django settings load from an environment
the test chooses: what a setting read at import (from the environment) does can only be seen
in a process that imports the settings afresh."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping


def run_with_environment(
    code: str, environment: Mapping[str, str], *, unset: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """``code`` run by ``python -c`` with this process's environment, ``unset`` removed and
    ``environment`` added, and ``config.settings`` as the settings module."""
    env = {name: value for name, value in os.environ.items() if name not in unset}
    env |= {"DJANGO_SETTINGS_MODULE": "config.settings", **environment}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )

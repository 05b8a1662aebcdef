"""The alerting rules (docs/observability/alerts.yml) load in Prometheus and fire when they
should: ``promtool check rules`` validates them, ``promtool test rules`` runs their unit tests
(docs/observability/alerts_test.yml) on synthetic series.

promtool ships in Debian's ``prometheus`` package, which ``scripts/ensure_services.sh`` installs;
without it these tests skip and say so.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

RULES = Path(__file__).resolve().parents[2] / "docs" / "observability"
PROMTOOL = shutil.which("promtool")

pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (apt-get install prometheus)"
)


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=RULES, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_rules_are_valid() -> None:
    result = promtool("check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_alerts_fire_on_the_series_they_are_about() -> None:
    result = promtool("test", "rules", "alerts_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_and_recording_rule_has_a_unit_test() -> None:
    """An alert without a unit test is a claim nobody checked: seven rules had none, and
    DeadLettersGrowing's summary gave delta()'s extrapolated 1.0140845 as the number of new
    letters."""
    rules = (RULES / "alerts.yml").read_text()
    tests = (RULES / "alerts_test.yml").read_text()
    alerts = re.findall(r"^\s*- alert: (\S+)$", rules, flags=re.MULTILINE)
    records = re.findall(r"^\s*- record: (\S+)$", rules, flags=re.MULTILINE)
    assert "OrderIdWorkerIdsRunningOut" in alerts and len(records) == 2  # the patterns match
    assert [name for name in alerts if f"alertname: {name}\n" not in tests] == []
    assert [name for name in records if f"expr: round({name}," not in tests] == []


@pytest.mark.parametrize("name", ["prometheus.yml", "prometheus-through-proxy.yml"])
def test_the_documented_prometheus_configurations_load(tmp_path: Path, name: str) -> None:
    """Each of docs/observability's, with a token file where it names one, and the rules."""
    token = tmp_path / "ordering-metrics-token"
    token.write_text("scrape-token\n")
    config = (RULES / name).read_text()
    assert config.count("job_name:") == 1  # one way to scrape each server, not two
    (tmp_path / "prometheus.yml").write_text(
        config.replace("/etc/prometheus/ordering-metrics-token", str(token))
    )
    shutil.copy(RULES / "alerts.yml", tmp_path / "alerts.yml")
    assert PROMTOOL is not None
    result = subprocess.run(
        [PROMTOOL, "check", "config", "prometheus.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"SUCCESS: [1-9][0-9]* rules found", result.stdout), result.stdout


SETTINGS = RULES.parents[1] / "config" / "settings.py"


def test_each_setting_an_alert_tells_operators_to_change_is_read_from_the_environment() -> None:
    """The settings are the environment's (README, "Run it in production"): a runbook step
    "raise AUDIT_DRAIN_BATCH" named a value only an edit of config/settings.py could change."""
    rules = (RULES / "alerts.yml").read_text()
    told = {
        name
        for line in rules.splitlines()
        if line.strip().startswith("description:")
        for name in re.findall(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b", line)
    }
    assert told, "no setting named: the pattern is wrong"
    source = SETTINGS.read_text()
    unread = sorted(name for name in told if not re.search(rf"""\(\s*["']{name}["']""", source))
    assert unread == []

"""schemathesis against the OpenAPI schema (``/api/schema/``) of a live, production-like server.

Every operation of the schema is called with generated valid and invalid data — as a diner app,
and (for the merchant-only transition) as a merchant integration — by the schemathesis CLI in a
subprocess, exactly as a developer would run it. The run happens once per module; the tests
below then read its findings:

- no answer is a 5xx (``not_a_server_error``), whatever the input;
- every answer's status and body are what the schema declares (``status_code_conformance``,
  ``response_schema_conformance``), so generated clients can rely on it;
- the payment callback, which authenticates by signature, refuses every unsigned request (4xx).

The live tenant's real order and dish ids are mixed into generated cases
(``tests/hardening/schemathesis_hooks.py``) so success paths are exercised too. Reproduce a
finding by hand: start the app, then run the command printed in the failure message.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.management import call_command

from ordering.models import OrderStatus
from tests.hardening.conftest import ORDER_DINER, World, build_world, make_order
from tests.support.live_server import PROJECT_ROOT, LiveServer
from tests.support.waiting import DEADLINE_SECONDS

# transaction=True: the live server sees committed rows only (and pytest-django creates the
# test database only for a session that has database tests).
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Cases per operation and phase: the module stays well under a minute. For a deeper sweep, e.g.
# before a release: HARDENING_SCHEMATHESIS_EXAMPLES=100 pytest tests/hardening/test_schemathesis.py
MAX_EXAMPLES = int(os.environ.get("HARDENING_SCHEMATHESIS_EXAMPLES", 6))
SEED = 20_240_601
CHECKS = ("not_a_server_error", "status_code_conformance", "response_schema_conformance")
CONFORMANCE_CHECKS = ("status_code_conformance", "response_schema_conformance")
CALLBACK_PATH = "/api/v1/payments/callback/"
SIGN_OUT_REGEX = r"/diner-sessions/end/$"
RUN_TIMEOUT_SECONDS = 3 * DEADLINE_SECONDS  # a whole schemathesis run, on a busy machine


@dataclass(frozen=True)
class Finding:
    operation: str
    check: str
    status: int | None
    message: str
    request: str

    def __str__(self) -> str:
        first_lines = " | ".join(self.message.strip().splitlines()[:3])
        return (
            f"{self.operation} [{self.check}] -> {self.status}: {first_lines}\n    {self.request}"
        )


@dataclass
class Run:
    """One schemathesis run: its command, exit code, findings and what the server saw."""

    name: str
    command: list[str]
    returncode: int
    output: str
    findings: list[Finding]
    statuses: dict[str, Counter[int]] = field(default_factory=dict)

    def failures(self, *checks: str) -> list[Finding]:
        return [f for f in self.findings if f.check in checks]

    def describe(self, findings: list[Finding]) -> str:
        listed = "\n".join(str(f) for f in findings)
        command = " ".join(self.command)
        return f"{len(findings)} finding(s) in the {self.name} run:\n{listed}\n\nrun: {command}"


def schema_operations(server: LiveServer) -> set[str]:
    schema = httpx.get(
        f"{server.url}/api/schema/", params={"format": "json"}, timeout=DEADLINE_SECONDS
    ).json()
    return {
        f"{method.upper()} {path}"
        for path, operations in schema["paths"].items()
        for method in operations
        if method in {"get", "post", "put", "patch", "delete"}
    }


def run_schemathesis(
    server: LiveServer,
    *,
    name: str,
    headers: dict[str, str],
    out_dir: Path,
    world: World,
    order_ids: list[int],
    include_path_regex: str | None = None,
    exclude_path_regex: str | None = None,
) -> Run:
    out_dir.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{server.url}/api/schema/",
        "--url",
        server.url,
        "--checks",
        ",".join(CHECKS),
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--phases",
        "examples,coverage,fuzzing",
        "--continue-on-failure",
        "--generation-with-security-parameters",
        "false",
        "--generation-database",
        "none",
        # one worker: with two, hypothesis's threads parse source at once, which Python 3.11's
        # ast module does not survive (cpython#106905: "AST constructor recursion depth
        # mismatch", a tool crash seen in a full run)
        "--workers",
        "1",
        "--no-color",
        "--report",
        "ndjson",
        "--report-dir",
        str(out_dir),
    ]
    for header, value in headers.items():
        command += ["--header", f"{header}: {value}"]
    if include_path_regex:
        command += ["--include-path-regex", include_path_regex]
    if exclude_path_regex:
        command += ["--exclude-path-regex", exclude_path_regex]
    env = {
        **os.environ,
        "PYTHONPATH": str(PROJECT_ROOT),
        "SCHEMATHESIS_HOOKS": "tests.hardening.schemathesis_hooks",
        "HARDENING_ORDER_IDS": ",".join(map(str, order_ids)),
        "HARDENING_DISH_IDS": str(world.dish.pk),
    }
    log_offset = _size(server.access_log_path)
    done = subprocess.run(
        command,
        cwd=out_dir,  # .hypothesis/ and .schemathesis/ land here, not in the project
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
    )
    statuses = statuses_since(server.access_log_path, log_offset)
    shown = [c if not c.startswith("Authorization") else "Authorization: …" for c in command]
    return Run(
        name=name,
        command=shown,
        returncode=done.returncode,
        output=done.stdout + done.stderr,
        findings=read_findings(out_dir),
        statuses=statuses,
    )


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def statuses_since(access_log: Path, offset: int) -> dict[str, Counter[int]]:
    """Statuses per "METHOD path" in gunicorn's access log after ``offset`` bytes.

    Read here rather than with ``LiveServer.access_log()``: fuzzed paths carry characters such as
    U+001C and U+0085 that ``str.splitlines()`` takes for line ends; only "\n" ends a line."""
    statuses: dict[str, Counter[int]] = {}
    with access_log.open("rb") as log:
        log.seek(offset)
        text = log.read().decode("utf-8", "replace")
    for line in text.split("\n"):
        fields = line.split("\t")
        if len(fields) == 6 and fields[3].isdigit():
            statuses.setdefault(f"{fields[1]} {fields[2]}", Counter())[int(fields[3])] += 1
    return statuses


def read_findings(out_dir: Path) -> list[Finding]:
    """Distinct failed checks from schemathesis' NDJSON event stream."""
    findings: dict[tuple[str, str, int | None, str], Finding] = {}
    for report in out_dir.glob("ndjson-*.ndjson"):
        for line in report.read_text().splitlines():
            event = json.loads(line)
            scenario = event.get("ScenarioFinished")
            if not scenario:
                continue
            recorder = scenario["recorder"]
            for case_id, checks in recorder.get("checks", {}).items():
                interaction = recorder.get("interactions", {}).get(case_id) or {}
                response = interaction.get("response") or {}
                for check in checks:
                    if check["status"] != "failure":
                        continue
                    failure = check["failure_info"]["failure"]
                    status = response.get("status_code")
                    key = (failure["operation"], check["name"], status, failure["title"])
                    findings.setdefault(
                        key,
                        Finding(
                            operation=failure["operation"],
                            check=check["name"],
                            status=status,
                            message=failure["message"],
                            request=_request_line(interaction.get("request") or {}),
                        ),
                    )
    return sorted(findings.values(), key=lambda f: (f.operation, f.check, f.status or 0))


def _request_line(request: dict[str, Any]) -> str:
    body = request.get("body")
    if isinstance(body, dict) and "$base64" in body:
        body = base64.b64decode(body["$base64"]).decode("utf-8", "backslashreplace")
    shown = body[:200] if isinstance(body, str) else json.dumps(body)[:200] if body else ""
    return f"{request.get('method', '?')} {request.get('uri', '?')} {shown}".strip()


@dataclass
class Sweep:
    operations: set[str]
    runs: dict[str, Run]


@pytest.fixture(scope="module")
def sweep(
    hardening_server: LiveServer,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Sweep]:
    """Committed data for the live server, both runs, and a clean database afterwards (like a
    ``transaction=True`` test, but shared by this module's tests)."""
    out = tmp_path_factory.mktemp("schemathesis")
    with django_db_blocker.unblock():
        world = build_world("schema", live=True)
        orders = [
            make_order(world.tenant, world.dish, status).pk
            for status in (OrderStatus.CREATED, OrderStatus.PAID, OrderStatus.ACCEPTED)
        ]
        # every credential of the runs, made while the database is reachable from here
        headers = {
            "diner": world.headers(diner=ORDER_DINER),
            "merchant": world.headers("merchant"),
            "publishable": world.headers("publishable"),
            "sign-out": world.headers(diner="signs-out"),
        }
    try:
        runs = {
            "diner": run_schemathesis(
                hardening_server,
                name="diner session, every operation but sign-out",
                headers=headers["diner"],
                out_dir=out / "diner",
                world=world,
                order_ids=orders,
                exclude_path_regex=SIGN_OUT_REGEX,
            ),
            "merchant": run_schemathesis(
                hardening_server,
                name="merchant key, every operation",
                headers=headers["merchant"],
                out_dir=out / "merchant",
                world=world,
                order_ids=orders,
            ),
            "publishable": run_schemathesis(
                hardening_server,
                name="publishable key, every operation",
                headers=headers["publishable"],
                out_dir=out / "publishable",
                world=world,
                order_ids=orders,
            ),
            # signing out ends the session: its own run, with a session of its own
            "sign-out": run_schemathesis(
                hardening_server,
                name="diner session, sign-out",
                headers=headers["sign-out"],
                out_dir=out / "sign-out",
                world=world,
                order_ids=orders,
                include_path_regex=SIGN_OUT_REGEX,
            ),
        }
        yield Sweep(operations=schema_operations(hardening_server), runs=runs)
    finally:
        with django_db_blocker.unblock():
            call_command("flush", interactive=False, verbosity=0)


RUNS = ["diner", "merchant", "publishable", "sign-out"]


@pytest.mark.parametrize("run", RUNS)
def test_no_operation_answers_5xx(sweep: Sweep, run: str) -> None:
    result = sweep.runs[run]
    assert "Traceback" not in result.output, result.output[-3000:]
    server_errors = result.failures("not_a_server_error")
    assert server_errors == [], result.describe(server_errors)
    assert not any(s >= 500 for c in result.statuses.values() for s in c), result.statuses


@pytest.mark.parametrize("run", ["diner", "merchant", "publishable"])
def test_every_schema_operation_was_exercised(sweep: Sweep, run: str) -> None:
    expected = {op for op in sweep.operations if not re.search(SIGN_OUT_REGEX, op)}
    statuses = sweep.runs[run].statuses
    called = {op for op in expected if _matching_requests(statuses, op)}
    assert called == expected, sorted(expected - called)
    sign_out = [op for op in sweep.operations if re.search(SIGN_OUT_REGEX, op)]
    assert _matching_requests(sweep.runs["sign-out"].statuses, sign_out[0])


def test_each_credential_reached_the_operations_its_capabilities_allow(sweep: Sweep) -> None:
    """A 2xx only where the credential may act: a publishable key never reaches order data."""
    successes = {
        run: {
            seen
            for seen, c in sweep.runs[run].statuses.items()
            if any(s < 300 for s in c) and not seen.startswith(("OPTIONS ", "GET /api/schema/"))
        }
        for run in ("publishable", "diner", "merchant")
    }
    assert successes["publishable"] == {"GET /api/v1/menu/", "POST /api/v1/diner-sessions/"}
    assert any(seen.startswith("POST /api/v1/orders/") for seen in successes["diner"]), successes
    merchant_only = ("POST /api/v1/diner-sessions/", "/revoke-sessions/")
    assert any(
        seen == merchant_only[0] or merchant_only[1] in seen for seen in successes["merchant"]
    ), successes


@pytest.mark.parametrize("run", RUNS)
def test_answers_conform_to_the_schema(sweep: Sweep, run: str) -> None:
    result = sweep.runs[run]
    mismatches = result.failures(*CONFORMANCE_CHECKS)
    assert mismatches == [], result.describe(mismatches)


def test_payment_callback_refuses_every_unsigned_request(sweep: Sweep) -> None:
    operation = f"POST {CALLBACK_PATH}"
    assert operation in sweep.operations, f"{CALLBACK_PATH} is missing from the schema"
    statuses = sweep.runs["diner"].statuses.get(operation, Counter())
    assert statuses, "schemathesis never called the payment callback"
    assert all(400 <= status < 500 for status in statuses), dict(statuses)


def _matching_requests(statuses: dict[str, Counter[int]], operation: str) -> int:
    """Requests the server saw for a schema operation (``{order_id}`` matches any segment)."""
    method, template = operation.split(" ", 1)
    pattern = re.compile(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)) + "$")
    return sum(
        sum(counter.values())
        for seen, counter in statuses.items()
        if seen.startswith(f"{method} ") and pattern.match(seen.split(" ", 1)[1])
    )

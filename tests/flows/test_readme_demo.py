"""The README's demo, run as a new user runs it: ``make run`` on SQLite with no Redis, then the
"Try the API" walkthrough exactly as the README prints it, then 16 threads sending one order
with one key (counted by view executions, ``tests/support/view_executions.py``: on SQLite the
writer lock is the engine's database claim).

The walkthrough is read from README.md (the fenced block after the ``walkthrough`` marker) and
run with bash; the only substitution is the port, because the demo here listens on a free port
instead of 8000. ``KEY`` is set from the printout of ``make run``, as the README tells the
reader to do. ``make run`` works in the repository with its database, demo-keys file and port
moved into a temporary directory, so a developer's ``db.sqlite3`` and ``var/`` stay untouched.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import httpx
import pytest

from ordering.models import Coupon, Order, OutboxEvent
from tests.support.ports import free_port
from tests.support.view_executions import executions, server_env
from tests.support.waiting import DEADLINE_SECONDS, wait_until

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
IDEMPOTENCY_DOC = ROOT / "docs" / "idempotency.md"
MARKER = "<!-- walkthrough:"
DEMO_PORT = "127.0.0.1:8000"
STORM_THREADS = 16

pytestmark = pytest.mark.slow

# Variables a developer's shell or `make test` may set that would point the demo elsewhere.
_NOT_INHERITED = (
    "DATABASE_URL",
    "REDIS_URL",
    "REDIS_SHARDS",
    "REDIS_CLUSTER_URL",
    "CELERY_BROKER_URL",
    "APP_DB_NAME",
    "DEMO_KEYS_FILE",
    "MAKEFLAGS",
    "MFLAGS",
    "MAKELEVEL",
)


def readme_walkthrough(document: Path = README) -> str:
    """The fenced block that follows the walkthrough marker in ``document`` (README.md)."""
    text = document.read_text()
    assert MARKER in text, f"{document.name} lost its walkthrough marker ({MARKER} ...)"
    after = text[text.index(MARKER) :]
    match = re.search(r"```sh\n(.*?)```", after, re.DOTALL)
    assert match is not None, "no ```sh block after the walkthrough marker"
    return match.group(1)


@dataclass(frozen=True)
class Demo:
    url: str
    port: int
    key: str
    database: Path
    printout: str
    executions: Path


def _untouched(paths: list[Path]) -> dict[Path, float | None]:
    return {p: (p.stat().st_mtime if p.exists() else None) for p in paths}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """``make run`` (migrate, seed_demo, serve) with DEBUG on, SQLite in a temporary
    directory and no Redis, until the module's tests are done."""
    home = tmp_path_factory.mktemp("demo")
    developer_files = [ROOT / "db.sqlite3", ROOT / "var" / "demo_keys.json"]
    before = _untouched(developer_files)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
    env |= {
        "DEBUG": "1",
        "DATABASE_URL": f"sqlite:///{home / 'db.sqlite3'}",
        "DEMO_KEYS_FILE": str(home / "demo_keys.json"),
        "PORT": str(port),
        # counts view executions (each held 0.3 s, so the storm's duplicates overlap the first)
        **server_env(home / "executions.log", hold_seconds=0.3),
    }
    log_path = home / "make-run.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            ["make", "--no-print-directory", "run", f"VENV={sys.prefix}"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        key = _wait_until_serving(process, url, log_path)
        yield Demo(
            url, port, key, home / "db.sqlite3", log_path.read_text(), home / "executions.log"
        )
    finally:
        _stop(process)
    assert _untouched(developer_files) == before, (
        "make run in the test touched the developer's files"
    )


def _wait_until_serving(process: subprocess.Popen[bytes], url: str, log_path: Path) -> str:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        printout = log_path.read_text(errors="replace")
        assert process.poll() is None, f"make run exited {process.returncode}:\n{printout}"
        key = re.search(r"^\s*KEY=(\S+)\s*$", printout, re.MULTILINE)
        if key:
            with suppress(httpx.TransportError):
                if httpx.get(f"{url}/api/schema/", timeout=2).status_code == 200:
                    return key.group(1)
        time.sleep(0.2)
    raise AssertionError(f"make run not serving after 180 s:\n{log_path.read_text()}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM make's process group: scripts/run_demo.sh stops the server it started."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)


def json_documents(text: str) -> list[str]:
    """The JSON documents printed one after another (``curl -s`` adds no newline), as text."""
    decoder = json.JSONDecoder()
    text = text.strip()
    documents, position = [], 0
    while position < len(text):
        _, end = decoder.raw_decode(text, position)
        documents.append(text[position:end])
        position = end
        while position < len(text) and text[position].isspace():
            position += 1
    return documents


def json_objects_in(text: str) -> list[dict]:
    """The JSON objects in ``text``, among headers and one after another (``curl -si`` and
    ``curl -s`` add no newline after a body)."""
    decoder = json.JSONDecoder()
    objects, position = [], text.find("{")
    while position != -1:
        value, end = decoder.raw_decode(text, position)
        objects.append(value)
        position = text.find("{", end)
    return objects


def order_command(walkthrough: str) -> str:
    """The walkthrough's order command (the one carrying an Idempotency-Key), continuation
    lines included; empty if there is none."""
    command = re.search(r"^curl [^\n]*Idempotency-Key[^\n]*\\\n[^\n]*$", walkthrough, re.MULTILINE)
    return command.group(0) if command else ""


def test_the_readme_walkthrough_runs_verbatim_on_the_embedded_demo(demo: Demo) -> None:
    walkthrough = readme_walkthrough().replace(DEMO_PORT, f"127.0.0.1:{demo.port}")
    # After the README's commands, in the same shell (same $TOKEN), check what the README says
    # of them: the order sent again replays; the publishable key alone cannot list orders.
    again = order_command(walkthrough).replace("curl -s ", "curl -si ", 1)
    script = (
        f"{walkthrough}\nprintf '\\n@@replay\\n'\n{again}\nprintf '\\n@@key-alone\\n'\n"
        f"curl -s -o /dev/null -w '%{{http_code}}' {demo.url}/api/v1/orders/ "
        '-H "Authorization: Api-Key $KEY"\n'
    )

    run = run_as_pasted(script, key=demo.key)

    assert run.returncode == 0, run.stdout + run.stderr
    walked, _, rest = run.stdout.partition("@@replay")
    replay, _, key_alone = rest.partition("@@key-alone")
    menu, order, listing = map(json.loads, raw := json_documents(walked))
    assert {dish["name"] for dish in menu} >= {"Margherita", "Carbonara"}, menu
    assert order.get("status") == "CREATED" and order["lines"][0]["quantity"] == 2, order
    assert [o["id"] for o in listing["results"]] == [order["id"]], listing
    assert (listing["next"], listing["previous"]) == (None, None), listing
    assert again, f"no order command with an Idempotency-Key in:\n{walkthrough}"
    head, _, body = replay.strip().partition("\n\n")  # text mode: CRLF read as LF
    assert head.startswith("HTTP/1.1 201"), replay
    assert "X-Idempotent-Result: HIT" in head, head
    assert body == raw[1]  # byte for byte
    assert key_alone.strip() == "403"


def run_as_pasted(commands: str, *, key: str) -> subprocess.CompletedProcess[str]:
    """``commands`` in a shell as a reader pastes them, with only ``PATH`` and the README's
    ``KEY`` set, stopping at the first failing command."""
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", commands],
        env={"PATH": os.environ["PATH"], "KEY": key},
        capture_output=True,
        text=True,
        timeout=DEADLINE_SECONDS,
    )


def test_the_idempotency_doc_s_examples_run_verbatim_on_the_embedded_demo(demo: Demo) -> None:
    """docs/idempotency.md's examples, pasted as they are with the README's ``KEY``: the order
    placed (MISS), the same key with another quantity refused (422), the order paid twice
    without a key, once (MISS, then the same answer replayed: HIT). Red: the 422's command was
    elided (``curl -s ...``, no answer) and the pay named an ``$ORDER_ID`` no command set."""
    examples = readme_walkthrough(IDEMPOTENCY_DOC).replace(DEMO_PORT, f"127.0.0.1:{demo.port}")

    run = run_as_pasted(examples, key=demo.key)

    assert run.returncode == 0, run.stdout + run.stderr
    results = re.findall(r"^X-Idempotent-Result: (\w+)$", run.stdout, re.MULTILINE)
    assert results == ["MISS", "MISS", "HIT"], run.stdout
    assert '"code":"IDEMPOTENCY_KEY_REUSED"' in run.stdout, run.stdout
    order, first_pay, second_pay = (
        answer for answer in json_objects_in(run.stdout) if "lines" in answer
    )
    assert (order["status"], first_pay["status"]) == ("CREATED", "PAYING"), run.stdout
    assert first_pay["id"] == order["id"] and second_pay == first_pay


def test_a_same_key_storm_of_16_threads_places_one_order(demo: Demo) -> None:
    session = httpx.post(
        f"{demo.url}/api/v1/diner-sessions/",
        headers={"Authorization": f"Api-Key {demo.key}"},
        timeout=DEADLINE_SECONDS,
    ).json()
    token = session["token"]
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "storm-1"}
    dish_id = httpx.get(
        f"{demo.url}/api/v1/menu/",
        headers={"Authorization": f"Api-Key {demo.key}"},
        timeout=DEADLINE_SECONDS,
    ).json()[0]["id"]
    body = {"items": [{"dish_id": dish_id, "quantity": 1}], "payment_method": "card"}
    start = threading.Barrier(STORM_THREADS)
    answers: list[httpx.Response] = []

    def send() -> None:
        start.wait()
        answers.append(
            httpx.post(
                f"{demo.url}/api/v1/orders/", headers=headers, json=body, timeout=DEADLINE_SECONDS
            )
        )

    threads = [threading.Thread(target=send) for _ in range(STORM_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)

    assert len(answers) == STORM_THREADS
    assert sorted(a.status_code for a in answers) == [201] * STORM_THREADS, [
        (a.status_code, a.text[:200]) for a in answers
    ]
    assert len({a.content for a in answers}) == 1
    results = sorted(a.headers["X-Idempotent-Result"] for a in answers)
    assert results == ["HIT"] * (STORM_THREADS - 1) + ["MISS"]
    listing = httpx.get(
        f"{demo.url}/api/v1/orders/",
        headers={"Authorization": f"Bearer {token}"},
        timeout=DEADLINE_SECONDS,
    )
    assert len(listing.json()["results"]) == 1
    with sqlite3.connect(demo.database) as db:
        [(orders,)] = db.execute(
            f"SELECT count(*) FROM {Order._meta.db_table} WHERE diner_id = ?",
            (session["diner_id"],),
        ).fetchall()
    assert orders == 1
    # and the view ran once: SQLite's writer lock (BEGIN IMMEDIATE) is the database claim
    # there, so the duplicates waited for the first to commit and replayed it (ADR 0005)
    assert len(executions(demo.executions, key="storm-1")) == 1


def test_an_order_refused_after_taking_stock_keeps_the_stock_and_replays_the_refusal(
    demo: Demo,
) -> None:
    """On SQLite the view's savepoint is a statement of its own (nothing rides along there):
    a refusal after a write rolls back to it and is recorded in the same transaction."""
    auth = {"Authorization": f"Api-Key {demo.key}"}
    token = httpx.post(
        f"{demo.url}/api/v1/diner-sessions/", headers=auth, timeout=DEADLINE_SECONDS
    ).json()["token"]

    def menu() -> dict[int, int]:
        dishes = httpx.get(f"{demo.url}/api/v1/menu/", headers=auth, timeout=DEADLINE_SECONDS)
        return {d["id"]: d["stock"] for d in dishes.json()}

    before = menu()
    # given an order whose first dish (stock is taken in id order) has stock and whose last
    # has too little: the first line's stock is taken, then the order is refused
    first, *_, last = sorted(before)
    assert before[first] >= 1 and before[last] < 100
    body = {
        "items": [
            {"dish_id": first, "quantity": 1},
            {"dish_id": last, "quantity": before[last] + 1},
        ],
        "payment_method": "card",
    }
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "refused-after-write"}
    answers = [
        httpx.post(
            f"{demo.url}/api/v1/orders/", headers=headers, json=body, timeout=DEADLINE_SECONDS
        )
        for _ in range(2)
    ]
    # then it is refused, the stock it took is back, and the retry replays the refusal
    assert [(a.status_code, a.headers["X-Idempotent-Result"]) for a in answers] == [
        (409, "MISS"),
        (409, "HIT"),
    ]
    assert answers[0].json()["code"] == "INSUFFICIENT_STOCK"
    assert answers[1].content == answers[0].content
    assert menu() == before
    assert len(executions(demo.executions, key="refused-after-write")) == 1


def test_an_order_of_two_dishes_with_the_demo_coupon_counts_one_use(demo: Demo) -> None:
    """On SQLite the stock is taken one dish per statement and the coupon's use is counted by
    an ``UPDATE ... RETURNING`` (SQLite 3.35 and later), as on PostgreSQL; the order's detail
    and its cancel read it as the ORM does there."""
    auth = {"Authorization": f"Api-Key {demo.key}"}
    token = httpx.post(
        f"{demo.url}/api/v1/diner-sessions/", headers=auth, timeout=DEADLINE_SECONDS
    ).json()["token"]
    dishes = httpx.get(f"{demo.url}/api/v1/menu/", headers=auth, timeout=DEADLINE_SECONDS).json()
    first, second = sorted(dishes, key=lambda d: d["id"])[:2]

    def uses() -> int:
        with sqlite3.connect(demo.database) as db:
            [(count,)] = db.execute(
                f"SELECT used_count FROM {Coupon._meta.db_table} WHERE code = 'WELCOME10'"
            ).fetchall()
        return count

    def order(key: str, coupon_code: str) -> httpx.Response:
        return httpx.post(
            f"{demo.url}/api/v1/orders/",
            headers={"Authorization": f"Bearer {token}", "Idempotency-Key": key},
            json={
                "items": [
                    {"dish_id": first["id"], "quantity": 1},
                    {"dish_id": second["id"], "quantity": 2},
                ],
                "payment_method": "card",
                "coupon_code": coupon_code,
            },
            timeout=DEADLINE_SECONDS,
        )

    before = uses()
    # when a diner orders two dishes with the demo's 10 % coupon
    placed = order("coupon-order", "WELCOME10")
    # then the order carries the coupon and its discount, and one use is counted
    assert placed.status_code == 201, placed.text
    subtotal = Decimal(first["price"]) + 2 * Decimal(second["price"])
    discount = (subtotal / 10).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    assert placed.json()["coupon_code"] == "WELCOME10"
    assert (Decimal(placed.json()["discount"]), Decimal(placed.json()["total"])) == (
        discount,
        subtotal - discount,
    )
    assert uses() == before + 1
    # and the order's detail (its relations read one statement each on SQLite, decimals and
    # times converted) shows what the answer showed
    detail = httpx.get(
        f"{demo.url}{placed.headers['Location']}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=DEADLINE_SECONDS,
    )
    assert detail.status_code == 200, detail.text
    assert detail.json() == placed.json()
    # and cancelling it (the move's conditional update, its lines read with the order) gives
    # the coupon's use back
    cancelled = httpx.post(
        f"{demo.url}{placed.headers['Location']}cancel/",
        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": "coupon-cancel"},
        timeout=DEADLINE_SECONDS,
    )
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "CANCELLED"
    assert uses() == before
    # and an unknown code is refused without counting anything
    refused = order("coupon-unknown", "NOPE")
    assert (refused.status_code, refused.json()["code"]) == (422, "COUPON_INVALID")
    assert uses() == before


def test_a_paid_order_writes_its_event_with_the_version_it_announces(demo: Demo) -> None:
    """On SQLite the outbox event's version (the order's number of transitions) is counted by
    a statement of its own just before the event's insert, where PostgreSQL counts it in the
    insert's statement."""
    auth = {"Authorization": f"Api-Key {demo.key}"}
    token = httpx.post(
        f"{demo.url}/api/v1/diner-sessions/", headers=auth, timeout=DEADLINE_SECONDS
    ).json()["token"]
    [dish, *_] = httpx.get(
        f"{demo.url}/api/v1/menu/", headers=auth, timeout=DEADLINE_SECONDS
    ).json()
    diner = {"Authorization": f"Bearer {token}"}
    placed = httpx.post(
        f"{demo.url}/api/v1/orders/",
        headers={**diner, "Idempotency-Key": "paid-order"},
        json={"items": [{"dish_id": dish["id"], "quantity": 1}], "payment_method": "card"},
        timeout=DEADLINE_SECONDS,
    )
    assert placed.status_code == 201, placed.text
    # when the diner pays, and the demo's provider confirms the payment by its signed callback
    paying = httpx.post(
        f"{demo.url}{placed.headers['Location']}pay/",
        headers={**diner, "Idempotency-Key": "paid-order-pay"},
        timeout=DEADLINE_SECONDS,
    )
    assert paying.status_code == 200, paying.text

    def status() -> str:
        detail = httpx.get(
            f"{demo.url}{placed.headers['Location']}", headers=diner, timeout=DEADLINE_SECONDS
        )
        return detail.json()["status"]

    wait_until(lambda: status() == "PAID", what="the demo's provider confirming the payment")
    # then the order's one event announces its third transition (CREATED, PAYING, PAID)
    with sqlite3.connect(demo.database) as db:
        events = db.execute(
            f"SELECT event_type, version FROM {OutboxEvent._meta.db_table} WHERE order_id = ?",
            [int(placed.json()["id"])],
        ).fetchall()
    assert events == [("order.paid", 3)]

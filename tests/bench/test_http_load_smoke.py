"""Keeps ``bench/http_load.py`` runnable: the whole harness end to end on a tiny workload.

Real processes as in a full run (a fresh PostgreSQL database, four gunicorn servers, three extra
Redis nodes, wrk with ``bench/wrk/orders.lua``), one second per case. Asserts counts and
invariants only, never timings. Redis is a private node started here (nothing shared is
flushed), the database has a unique name and is dropped at the end.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from bench.http_load import (
    CASES,
    DOC_BEGIN,
    DOC_END,
    Options,
    format_table,
    markdown_results,
    run,
    write_docs,
)
from tests.support.redis_nodes import RedisNode

pytestmark = pytest.mark.slow

WORKERS = 2
PRELOAD = 300


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory):
    if shutil.which("wrk") is None:
        pytest.fail("wrk is not installed: apt-get install -y wrk (scripts/ensure_services.sh)")
    node = RedisNode().start()
    try:
        yield run(
            Options(
                duration=1,
                rounds=1,
                warmup=0,
                connections=4,
                threads=1,
                workers=WORKERS,
                tenants=3,
                dishes=2,
                replay_keys=12,
                round_trip_requests=1,
                db_name=f"bench_smoke_{uuid.uuid4().hex[:8]}",
                redis_url=f"redis://127.0.0.1:{node.port}/0",
                log_dir=tmp_path_factory.mktemp("http_load"),
                cases=tuple(c.key for c in CASES),
                preload=PRELOAD,
                quiet=True,
            )
        )
    finally:
        node.remove()


def test_every_case_ran_and_answered_2xx(report) -> None:
    assert [r.case.key for r in report.results.values()] == [c.key for c in CASES]
    for res in report.results.values():
        assert len(res.runs) == 1
        assert res.requests > 0, res.case.key
        assert res.socket_errors == 0, res.case.key
        statuses = set(res.summary()["statuses"])
        # mixed: a duplicate still running after the endpoint's 2 s wait would get 409
        allowed = {"201", "409"} if res.case.mode == "mixed" else {"201"}
        assert statuses <= allowed, (res.case.key, statuses)


def test_engine_answers_match_each_case(report) -> None:
    results = {k: r.results() for k, r in report.results.items()}
    assert set(results["create_off"]) == {"-"}  # engine off: no X-Idempotent-Result
    for key in ("create_on", "create_dbonly", "create_sharded"):
        assert set(results[key]) == {"MISS"}, key
    assert set(results["replay"]) == {"HIT"}
    assert set(results["create_1m"]) == {"MISS"}
    assert set(results["plain_engine"]) == {"MISS"}
    for key in ("plain", "plain_1m", "plain_peer"):  # no engine in front (the peer's own)
        assert set(results[key]) == {"-"}, key
    rc = report.replay_check
    assert rc["ok"], rc
    assert rc["hit_share"] == 1
    assert rc["checked"] == 5
    assert sum(rc["sources"].values()) >= rc["checked"]
    assert all(k.startswith("HIT/") for k in rc["sources"])


def test_mixed_load_has_no_duplicate_and_no_lost_order(report) -> None:
    assert set(report.invariants) == {"mixed", "mixed_dbonly"}
    for name, inv in report.invariants.items():
        assert inv["ok"] == 1, (name, inv)
        assert inv["duplicate_orders"] == 0
        assert inv["lost_acknowledged"] == 0
        assert inv["acknowledged_id_mismatch"] == 0
        assert inv["keys_acknowledged"] <= inv["keys_with_an_order"] <= inv["keys_sent"]
        assert inv["orders"] == inv["keys_with_an_order"] == inv["idempotency_records"]
        assert inv["requests_new"] == inv["keys_sent"] > 0


def test_servers_ratios_and_report(report) -> None:
    assert set(report.servers) == {"redis", "off", "dbonly", "sharded"}
    for name, facts in report.servers.items():
        assert facts["workers_booted"] == WORKERS, name
        assert 1 <= facts["workers_answering"] <= WORKERS, name
        assert facts["tracebacks"] == 0, name
    # every shard node serves tenants (the seed adds tenants until each has two) and got keys
    assert min(report.tenants_per_shard) >= 2
    assert all(keys > 0 for keys in report.shard_keys)
    ratios = {r["ratio"]: r for r in report.ratios}
    assert list(ratios)[:6] == [
        "order create, engine on / plain",
        "order replay / plain",
        "engine on / engine off (order create)",
        "database-only / Redis (order create)",
        "plain behind @idempotent / plain",
        "plain behind @idempotent / behind drf-idempotency",
    ]
    assert ratios["order create p99 / p50 (engine on)"]["at_least"] is False
    assert ratios["order create at 1M / empty (each against plain)"]["target"] == 0.9
    assert all(r["paired_range"] is not None for r in report.ratios)
    assert report.ok


def test_footprint_after_the_preload(report) -> None:
    fp = report.footprint
    assert fp["keys_sampled"] > 0 and 0 < fp["median_bytes"] <= fp["max_bytes"]
    assert fp["preload"]["rows_per_table"] == PRELOAD
    # every preloaded record plus the ones the cases wrote
    assert fp["records"]["rows"] > PRELOAD and fp["records"]["bytes_per_row"] > 0
    assert "MEMORY USAGE per finished one-line order key" in format_table(report)


def test_round_trips_counted_under_every_servers_settings(report) -> None:
    rt = report.round_trips
    assert set(rt) == {"redis", "off", "dbonly", "sharded"}
    assert set(rt["off"]) == {"create"}
    for name in ("redis", "dbonly", "sharded"):
        assert rt[name]["create"]["statuses"] == ["201 MISS"], name
        assert rt[name]["replay"]["statuses"] == ["201 HIT"], name
        # a replay from the local cache only appends its audit to the Redis stream (none without)
        assert rt[name]["replay_local"]["redis"] == (0 if name == "dbonly" else 1), name
    # without Redis the engine makes no Redis round trip; with it a replay makes at most two
    # (the stored reply, the audit)
    assert rt["dbonly"]["create"]["redis"] == 0
    assert rt["redis"]["replay"]["redis"] <= 2
    # on the wire, the engine's transaction sends no BEGIN or COMMIT of its own (the claim
    # carries one, the record the other), where the order's own transaction, engine off, sends
    # both (in-process, Django's test client makes no per-request health check)
    for name in ("redis", "dbonly", "sharded"):
        create = rt[name]["create"]
        assert create["pg"] == create["sql"], (name, create)
    assert rt["off"]["create"]["pg"] == rt["off"]["create"]["sql"] + 2, rt["off"]["create"]
    # a replay the database answers writes its audit in a transaction that costs no round trip
    # of its own either (idempotency/audit/storage.py)
    assert rt["dbonly"]["replay"]["pg"] == rt["dbonly"]["replay"]["sql"], rt["dbonly"]["replay"]
    assert rt["redis"]["replay_local"]["pg"] == 0  # no database at all
    table = format_table(report)
    assert all(c.label in table for c in CASES)
    md = markdown_results(report, None)
    assert md.count("\n| ") >= len(CASES)


def test_write_docs_keeps_other_sections(report, tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Tokens\n\nsomeone else's numbers\n")
    write_docs(report, None, doc_path=doc)
    write_docs(report, None, doc_path=doc)  # a second run replaces its block, nothing else
    text = doc.read_text()
    assert "## Tokens\n\nsomeone else's numbers" in text
    assert text.count(DOC_BEGIN) == text.count(DOC_END) == 1
    assert "create, engine off" in text

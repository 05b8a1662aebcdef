"""Tenant placement on Redis nodes: stable, even, and moving few tenants when nodes change."""

from __future__ import annotations

from collections import Counter

from tenants.redis_routing import node_identity, rendezvous_pick

NODES = [f"127.0.0.1:{7000 + i}/0" for i in range(4)]
TENANTS = [f"tenant:{i}" for i in range(4000)]


def placement(nodes: list[str]) -> dict[str, str]:
    return {t: nodes[rendezvous_pick(t, nodes)] for t in TENANTS}


def test_placement_is_even_and_stable():
    first = placement(NODES[:3])
    assert first == placement(NODES[:3])
    counts = Counter(first.values())
    assert all(1150 < n < 1520 for n in counts.values()), counts


def test_adding_a_fourth_node_moves_about_a_quarter_and_only_to_it():
    before, after = placement(NODES[:3]), placement(NODES)
    moved = [t for t in TENANTS if before[t] != after[t]]
    assert 0.20 < len(moved) / len(TENANTS) < 0.30
    assert {after[t] for t in moved} == {NODES[3]}


def test_removing_a_node_moves_only_its_tenants():
    before, after = placement(NODES), placement([NODES[0], NODES[1], NODES[3]])
    moved = [t for t in TENANTS if before[t] != after[t]]
    assert moved and all(before[t] == NODES[2] for t in moved)


def test_order_of_nodes_does_not_matter():
    assert placement(NODES) == placement(list(reversed(NODES)))


def test_node_identity_ignores_credentials_and_scheme():
    assert node_identity("redis://:secret@10.0.0.5:6380/2") == "10.0.0.5:6380/2"
    assert node_identity("redis://localhost") == "localhost:6379/0"

"""The store sets each domain's spare count on the fleet it serves, again when only the quota objects change."""

from __future__ import annotations

from typing import Any

from kilter.state.events import MODIFIED, Event
from kilter.state.store import ClusterStore
from kilter.topology import spares
from tests.topology.builders import rack

KEY = "kilter.dev/spare-nodes-per-domain"


def queue(count: str) -> dict[str, Any]:
    quota = {"name": "gb200", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8"}]}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "q", "annotations": {KEY: count}},
        "spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [quota]}]},
    }


FLAVOR = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "gb200"}}


def test_a_changed_queue_moves_the_spares_without_a_fleet_rebuild_and_a_bad_one_is_a_problem() -> None:
    store = ClusterStore(spare_nodes_default=1)
    store.replace([*rack("r1", 4), FLAVOR, queue("2")])
    fleet, generation = store.fleet(), store.generation
    assert fleet.spare_nodes is not None and fleet.spare_nodes.tolist() == [2]  # the queue's 2 beats the default 1
    store.apply([Event(MODIFIED, queue("3"))])
    assert store.fleet() is fleet and store.generation == generation
    assert spares.held_count(fleet) == 3
    store.apply([Event(MODIFIED, queue("many"))])
    assert spares.held_count(store.fleet()) == 1  # skipped: the default decides
    assert f"ClusterQueue q: {KEY} must be a whole number from 0 to 18, got 'many'; skipped" in store.problems()


def test_the_idle_fleet_holds_the_same_spares_as_the_fleet() -> None:
    store = ClusterStore()
    store.replace([*rack("r1", 4), FLAVOR, queue("2")])
    idle = store.idle_fleet()
    assert spares.held_count(idle) == 2
    store.apply([Event(MODIFIED, queue("0"))])
    assert spares.held_count(store.idle_fleet()) == 0

"""The state store: watch events in, bookings moved incrementally, the fleet rebuilt only when nodes change."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from kilter.model.core_v1 import Pod
from kilter.state.feed import SnapshotFeed
from kilter.state.store import ADDED, DELETED, MODIFIED, ClusterStore, Event, object_key
from tests.extenders.conftest import cluster_objects, pod_json, write_snapshot
from tests.topology.builders import CLIQUE, TIER1, node_dict


def free(store: ClusterStore, node: str) -> int:
    fleet = store.fleet()
    return fleet.bitmap.node_free_gpus(fleet.node_index[node])


def test_a_relist_becomes_the_events_that_turn_the_old_set_into_the_new() -> None:
    store = ClusterStore()
    first = store.replace(cluster_objects())
    assert {e.type for e in first} == {ADDED} and len(first) == len(cluster_objects())
    objects = cluster_objects()
    objects = [o for o in objects if o["metadata"]["name"] != "r1-t17"]
    objects[0] = {**objects[0], "metadata": {**objects[0]["metadata"], "labels": {"x": "y"}}}
    objects.append(pod_json("new", 1, node="r1-t03"))
    events = store.replace(objects)
    assert sorted((e.type, object_key(e.object)[3]) for e in events) == [
        (ADDED, "new"),
        (DELETED, "r1-t17"),
        (MODIFIED, "r1-t00"),
    ]
    assert store.replace(objects) == []  # nothing changed, nothing emitted


def test_a_malformed_node_in_a_relist_is_left_out_and_named_and_the_rest_is_kept() -> None:
    store = ClusterStore()
    store.replace(cluster_objects())
    version, held = store.version, dict(store.objects)
    broken = [*cluster_objects(), {**node_dict("bad"), "status": {"capacity": ["not", "a", "map"]}}]
    assert store.replace(broken) == []  # nothing else changed
    assert store.version == version and store.objects == held
    [why] = store.unreadable()
    assert why.startswith("Node bad left out") and "status.capacity" in why
    store.replace(cluster_objects())
    assert store.unreadable() == []


def test_a_pod_event_rebuilds_the_pod_list_only() -> None:
    store = ClusterStore()
    store.replace(cluster_objects())
    before = store.state()
    store.apply([Event(ADDED, pod_json("x", 3, node="r1-t02"))])
    after = store.state()
    assert after is not before and "x" in {p.metadata.name for p in after.pods}
    assert after.nodes is before.nodes and after.topologies is before.topologies  # not converted again
    assert isinstance(store.pod_named("ml", "x"), Pod)


def test_pod_events_move_bookings_without_rebuilding_the_fleet() -> None:
    store = ClusterStore()
    store.replace(cluster_objects())
    assert free(store, "r2-t00") == 0 and free(store, "r2-t01") == 2
    generation = store.generation
    finished = {**pod_json("half", 2, node="r2-t01"), "status": {"phase": "Succeeded"}}
    store.apply([Event(MODIFIED, finished)])
    assert free(store, "r2-t01") == 4
    store.apply([Event(ADDED, pod_json("x", 3, node="r1-t02"))])
    assert free(store, "r1-t02") == 1
    store.apply([Event(DELETED, pod_json("x", 3, node="r1-t02"))])
    assert free(store, "r1-t02") == 4
    assert store.generation == generation  # pods never cost a rebuild


def test_node_events_rebuild_the_fleet_and_keep_every_booking() -> None:
    store = ClusterStore()
    store.replace(cluster_objects())
    store.assume("uid-pending", "r1-t04", 4)
    generation = store.generation
    store.apply([Event(ADDED, node_dict("r3-t00", labels={CLIQUE: "r3", TIER1: "leaf-a"}))])
    assert "r3-t00" in store.fleet().node_index and store.generation == generation + 1
    assert free(store, "r2-t00") == 0 and free(store, "r2-t01") == 2
    assert free(store, "r1-t04") == 0  # the assumed pod survived the rebuild


def test_an_assumed_pod_is_not_counted_twice_when_the_feed_shows_it_bound() -> None:
    store = ClusterStore()
    store.replace(cluster_objects())
    store.assume("uid-p", "r1-t00", 2)
    assert free(store, "r1-t00") == 2
    store.apply([Event(ADDED, pod_json("p", 2, node="r1-t00"))])
    assert free(store, "r1-t00") == 2
    booking = store.booking("uid-p")
    assert booking is not None and not booking.assumed


def test_the_snapshot_feed_reloads_a_changed_file_and_survives_a_broken_one(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.json"
    write_snapshot(path, cluster_objects())
    store = ClusterStore()
    feed = SnapshotFeed(path, store, interval_s=0.02)
    feed.load()
    assert store.ready and "r1-t00" in store.fleet().node_index

    async def scenario() -> None:
        task = asyncio.create_task(feed.watch())
        try:
            path.write_text("{ this is not json")
            await _until(lambda: feed.last_error is not None)
            assert "r1-t00" in store.fleet().node_index  # the old state stays
            objects = [o for o in cluster_objects() if o["metadata"]["name"] != "r1-t00"]
            path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}) + "\n")
            await _until(lambda: "r1-t00" not in store.fleet().node_index)
            assert feed.last_error is None
        finally:
            task.cancel()

    asyncio.run(scenario())


async def _until(condition: object, timeout: float = 10.0) -> None:
    assert callable(condition)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            pytest.fail("condition not reached")
        await asyncio.sleep(0.02)


def test_pods_are_found_by_indexed_labels_and_the_index_follows_every_change() -> None:
    store = ClusterStore()
    store.replace(cluster_objects())
    store.index_pods(["kilter.dev/gang"], ["kueue.x-k8s.io/workload"])

    def gang(name: str, label: str, node: str = "") -> dict[str, object]:
        return pod_json(name, 1, labels={"kilter.dev/gang": label, "team": "a"}, node=node)

    store.apply([Event(ADDED, gang("a0", "a")), Event(ADDED, gang("a1", "a")), Event(ADDED, gang("b0", "b"))])

    def names(labels: dict[str, str], namespace: str = "ml") -> set[str]:
        return {p.metadata.name for p in store.pods_with(namespace, labels, {})}

    assert names({"kilter.dev/gang": "a"}) == {"a0", "a1"}  # builds the index
    assert names({"kilter.dev/gang": "a"}, namespace="other") == set()
    store.apply([Event(MODIFIED, gang("a1", "b")), Event(DELETED, gang("a0", "a")), Event(ADDED, gang("a2", "a"))])
    assert names({"kilter.dev/gang": "a"}) == {"a2"} and names({"kilter.dev/gang": "b"}) == {"a1", "b0"}
    assert names({"kilter.dev/gang": "b", "team": "a"}) == {"a1", "b0"}  # an unindexed key filters the candidates
    assert names({"team": "a"}) == {"a1", "a2", "b0"}  # nothing indexed: every pod is read


def test_asking_to_index_keys_already_indexed_keeps_the_index_and_new_keys_add_to_it() -> None:
    """The gang book and a served ``explain`` each ask for their keys; neither may drop the other's, and asking
    again must not rebuild the index from every pod (it did, costing ~0.5 s of the event loop on 150,000 pods)."""
    store = ClusterStore()
    store.replace([*cluster_objects(), pod_json("a0", 1, labels={"kilter.dev/gang": "a", "job": "j"})])
    store.index_pods(["kilter.dev/gang"], [])
    assert [p.metadata.name for p in store.pods_with("ml", {"kilter.dev/gang": "a"}, {})] == ["a0"]
    built = store._pod_index._index
    store.index_pods(["kilter.dev/gang"], [])
    assert store._pod_index._index is built  # kept, not rebuilt
    store.index_pods(["job"], [])
    assert store._pod_index._keys[0] == {"kilter.dev/gang", "job"}
    assert [p.metadata.name for p in store.pods_with("ml", {"job": "j"}, {})] == ["a0"]
    assert [p.metadata.name for p in store.pods_with("ml", {"kilter.dev/gang": "a"}, {})] == ["a0"]
    assert ("ml", True, "kilter.dev/gang", "a") in (store._pod_index._index or {})  # still indexed


def test_a_first_load_holds_what_a_relist_over_other_objects_holds() -> None:
    """A store's first ``replace`` adds every object without comparing; it must end where the comparing path ends."""
    objects = [*cluster_objects(), pod_json("late", 2, node="r1-t01"), pod_json("late", 1, node="r1-t02")]
    first = ClusterStore()
    events = first.replace(objects)
    relisted = ClusterStore()
    relisted.replace([node_dict("gone", labels={CLIQUE: "x", TIER1: "y"}), pod_json("old", 4, node="gone")])
    relisted.replace(objects)
    assert first.objects == relisted.objects
    assert {e.type for e in events} == {ADDED} and len(events) == len(first.objects)
    assert dict(first.bookings()) == dict(relisted.bookings())
    assert first.fleet().summary() == relisted.fleet().summary()
    assert first.problems() == relisted.problems()  # the duplicate "late" pod is named by both paths
    assert [p.metadata.name for p in first.pods()] == [p.metadata.name for p in relisted.pods()]

"""Reservations: GPUs a gang's plan holds, booked in the store like pods, all or nothing, kept across fleet rebuilds."""

from __future__ import annotations

from kilter.state.store import ADDED, DELETED, MODIFIED, ClusterStore, Event
from tests.extenders.conftest import cluster_objects, pod_json
from tests.topology.builders import CLIQUE, TIER1, node_dict

GANG = "ml/gang/g"


def store_of() -> ClusterStore:
    store = ClusterStore()
    store.replace(cluster_objects())  # 4-GPU trays r1-t00..t17, r2-t00..t17; r2-t00 full, r2-t01 has 2 free
    return store


def free(store: ClusterStore, node: str) -> int:
    fleet = store.fleet()
    return fleet.bitmap.node_free_gpus(fleet.node_index[node])


def total_free(store: ClusterStore) -> int:
    return int(store.fleet().bitmap.domain_free_gpus.sum())


def rebuild(store: ClusterStore) -> None:
    """A node joins: the store builds the fleet anew on next use."""
    generation = store.generation
    store.apply([Event(ADDED, node_dict("r9-t00", labels={CLIQUE: "r9", TIER1: "leaf-a"}))])
    store.fleet()
    assert store.generation == generation + 1


def test_a_reservation_books_its_gpus_and_unreserving_gives_them_back() -> None:
    store = store_of()
    before = total_free(store)
    assert store.reserve(GANG, [("r1-t00", 4), ("r1-t01", 2), ("r1-t01", 1)])
    assert total_free(store) == before - 7  # 4 + 2 + 1
    assert (free(store, "r1-t00"), free(store, "r1-t01")) == (0, 1)  # 4 - 4, 4 - 2 - 1
    assert store.is_reserved(GANG) and [(h.node, h.gpus) for h in store.reservation(GANG)] == [
        ("r1-t00", 4),
        ("r1-t01", 2),
        ("r1-t01", 1),
    ]
    store.unreserve(GANG)
    assert total_free(store) == before and not store.is_reserved(GANG)


def test_a_reservation_is_all_or_nothing() -> None:
    store = store_of()
    before = total_free(store)
    assert not store.reserve(GANG, [("r1-t00", 4), ("r2-t01", 4)])  # r2-t01 has 2 free
    assert not store.reserve(GANG, [("r1-t00", 4), ("r1-t00", 1)])  # 5 GPUs on a 4-GPU tray
    assert not store.reserve(GANG, [("r1-t00", 4), ("nowhere", 4)])  # no such node
    assert not store.reserve(GANG, [("r1-t00", 4), ("r1-t05", 4)])  # r1-t05 is cordoned
    assert total_free(store) == before and free(store, "r1-t00") == 4 and not store.is_reserved(GANG)


def test_a_reservation_is_kept_across_a_fleet_rebuild() -> None:
    store = store_of()
    assert store.reserve(GANG, [("r1-t00", 4), ("r1-t01", 2)])
    before = total_free(store)
    rebuild(store)
    assert total_free(store) == before + 4  # the new tray's 4; the reservation's 6 are still held
    assert (free(store, "r1-t00"), free(store, "r1-t01")) == (0, 2)
    assert not store.reservation_lost(GANG)
    fleet = store.fleet()
    assert [(h.node, h.node_index, h.gpus) for h in store.reservation(GANG)] == [
        ("r1-t00", fleet.node_index["r1-t00"], 4),
        ("r1-t01", fleet.node_index["r1-t01"], 2),
    ]


def test_a_reservation_whose_node_goes_is_lost_whole() -> None:
    store = store_of()
    assert store.reserve(GANG, [("r1-t00", 4), ("r1-t01", 4)])
    store.apply([Event(DELETED, node_dict("r1-t01"))])
    assert free(store, "r1-t00") == 4  # given back with the rest: no half plan is kept
    assert store.reservation_lost(GANG) and not store.is_reserved(GANG)
    assert not store.release_slot(GANG, "r1-t00", 4)  # nothing left to give back
    store.unreserve(GANG)
    assert not store.reservation_lost(GANG)


def test_a_reservation_whose_node_turned_unusable_is_lost() -> None:
    store = store_of()
    assert store.reserve(GANG, [("r1-t02", 4)])
    store.apply([Event(MODIFIED, node_dict("r1-t02", labels={CLIQUE: "r1", TIER1: "leaf-a"}, cordoned=True))])
    assert store.reservation_lost(GANG) and not store.is_reserved(GANG)


def test_a_reservation_whose_node_filled_up_is_lost_and_the_pod_keeps_its_gpus() -> None:
    store = store_of()
    before = total_free(store)
    assert store.reserve(GANG, [("r1-t02", 4)])
    store.apply([Event(ADDED, pod_json("intruder", 4, node="r1-t02"))])  # bound by someone else
    rebuild(store)  # bound pods are booked first, then reservations
    assert store.reservation_lost(GANG)
    assert free(store, "r1-t02") == 0 and total_free(store) == before + 4 - 4  # the new tray, the intruder's 4


def test_reservations_are_booked_again_oldest_first() -> None:
    store = store_of()
    assert store.reserve("ml/gang/a", [("r1-t03", 2)])
    assert store.reserve("ml/gang/b", [("r1-t03", 2)])
    store.apply([Event(ADDED, pod_json("intruder", 2, node="r1-t03"))])  # 2 GPUs the tray no longer has
    rebuild(store)
    assert store.is_reserved("ml/gang/a") and not store.reservation_lost("ml/gang/a")
    assert store.reservation_lost("ml/gang/b") and free(store, "r1-t03") == 0  # 4 - the pod's 2 - a's 2


def test_a_reserved_slot_that_is_bound_is_booked_once() -> None:
    store = store_of()
    before = total_free(store)
    assert store.reserve(GANG, [("r1-t06", 4), ("r1-t07", 4)])
    assert total_free(store) == before - 8
    assert store.release_slot(GANG, "r1-t06", 4)  # the pod was bound: its own booking takes over
    store.assume("uid-p0", "r1-t06", 4)
    assert total_free(store) == before - 8 and free(store, "r1-t06") == 0
    store.apply([Event(ADDED, pod_json("p0", 4, uid="uid-p0", node="r1-t06"))])  # the feed shows it bound
    assert total_free(store) == before - 8
    rebuild(store)
    assert total_free(store) == before + 4 - 8  # the new tray; p0's 4 and the open slot's 4, once each
    assert [(h.node, h.gpus) for h in store.reservation(GANG)] == [("r1-t07", 4)]
    assert not store.release_slot(GANG, "r1-t06", 4)  # that slot is gone: nothing is given back twice
    assert free(store, "r1-t06") == 0

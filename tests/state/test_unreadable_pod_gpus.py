"""A bound pod whose GPU count does not read (``nvidia.com/gpu: "abc"``), over a real ``kilter serve`` (issue #37).

The pod's node counts as full, the pod is named on ``/readyz``, every other
object of the snapshot applies wherever the pod sits in it, and the state
stays whole through later reloads and fleet rebuilds. A real API server
refuses such a quantity, so it reaches kilter through snapshot files; the
store's rule is checked event by event too, in every order.
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path
from typing import Any

import pytest

from kilter.model.errors import InputError
from kilter.state.store import ADDED, DELETED, ClusterStore, Event
from tests.extenders.conftest import Served, cluster_objects, names_args, pod_json, serve_snapshot
from tests.state.test_feed_faults import metric, readyz, until


def unreadable_pod(name: str, node: str, quantity: str = "abc") -> dict[str, Any]:
    pod = pod_json(name, 4, node=node)
    resources = pod["spec"]["containers"][0]["resources"]
    resources["limits"]["nvidia.com/gpu"] = resources["requests"]["nvidia.com/gpu"] = quantity
    return pod


def fitting(served: Served, nodes: list[str]) -> list[str]:
    """The nodes of ``nodes`` a 1-GPU pod may go to: a filter that answers without an error."""
    status, result = served.post("filter", names_args(pod_json("probe", 1), nodes))
    assert status == 200 and result["Error"] == "", result
    return list(result["NodeNames"] or [])


def refuses(served: Served, node: str) -> bool:
    return fitting(served, [node]) == []


def named(served: Served, pod: str) -> bool:
    status, lines = readyz(served)
    assert status == 200 and lines[0] == "ok", lines
    return any(line.startswith(f"pod ml/{pod}:") and "counted as full" in line for line in lines[1:])


FILLED = ["r1-t01", "r1-t02", "r1-t03"]  # each held whole by a readable 4-GPU pod listed after the unreadable one


def fillers() -> list[dict[str, Any]]:
    return [pod_json(f"filler-{n}", 4, node=n) for n in FILLED]


@pytest.mark.parametrize("quantity", ["abc", "-4", "0.5"])
def test_kilter_serve_starts_with_a_bound_pod_whose_gpu_count_does_not_read_and_holds_its_node(
    tmp_path: Path, quantity: str
) -> None:
    objects = [unreadable_pod("bad", "r1-t00", quantity), *cluster_objects(), *fillers()]
    with serve_snapshot(tmp_path, objects) as served:
        assert fitting(served, ["r1-t00", *FILLED, "r1-t04"]) == ["r1-t04"]
        assert named(served, "bad")
        assert metric(served, "kilter_state_objects_unreadable") == 1


def test_a_reload_listing_the_unreadable_pod_first_applies_every_other_object(tmp_path: Path) -> None:
    with serve_snapshot(tmp_path) as served:
        assert fitting(served, ["r1-t00", *FILLED]) == ["r1-t00", *FILLED]
        served.replace([unreadable_pod("bad", "r1-t00"), *cluster_objects(), *fillers()])
        until("the reload", lambda: named(served, "bad"))
        assert fitting(served, ["r1-t00", *FILLED, "r1-t04"]) == ["r1-t04"], "the pods after it are booked too"
        assert metric(served, "kilter_state_reload_ok") == 1
        assert served.store.pod_named("ml", f"filler-{FILLED[-1]}") is not None


def test_fleet_rebuilds_after_an_unreadable_pod_keep_every_later_booking_and_readyz_stays_200(tmp_path: Path) -> None:
    objects = [unreadable_pod("bad", "r1-t00"), *cluster_objects(), *fillers()]
    with serve_snapshot(tmp_path, objects) as served:
        generation = served.store.generation
        for cordoned in ("r1-t10", "r1-t11"):  # each reload changes a Node: the fleet is rebuilt, pods booked again
            changed = [o for o in objects if o["metadata"]["name"] != cordoned]
            node = next(o for o in objects if o["metadata"]["name"] == cordoned)
            changed.append({**node, "spec": {"unschedulable": True}})
            served.replace(changed)
            until(f"{cordoned} cordoned", functools.partial(refuses, served, cordoned))
            assert fitting(served, ["r1-t00", *FILLED, "r1-t04"]) == ["r1-t04"]
            assert named(served, "bad")
        assert served.store.generation > generation
        served.replace([o for o in objects if o["metadata"]["name"] != "bad"])
        until("the unreadable pod gone", lambda: fitting(served, ["r1-t00"]) == ["r1-t00"])
        assert readyz(served) == (200, ["ok"])
        assert fitting(served, [*FILLED]) == [], "its going frees its node only"


def _free(store: ClusterStore, node: str) -> int:
    fleet = store.fleet()
    return fleet.bitmap.node_free_gpus(fleet.node_index[node])


def _events() -> list[Event]:
    return [
        Event(ADDED, unreadable_pod("bad", "r1-t00")),
        Event(ADDED, pod_json("two", 2, node="r1-t00")),
        Event(ADDED, pod_json("one", 1, node="r1-t00")),
        Event(DELETED, unreadable_pod("bad", "r1-t00")),
        Event(DELETED, pod_json("two", 2, node="r1-t00")),
    ]


@pytest.mark.parametrize("order", list(itertools.permutations(range(5))), ids=lambda o: "".join(map(str, o)))
def test_a_node_with_an_unreadable_pod_is_full_and_its_readable_pods_stay_booked_whatever_the_order(
    order: tuple[int, ...],
) -> None:
    """Five events on one 4-GPU node, applied one at a time in every order (deleting a pod not bound yet is a
    no-op): while the unreadable pod is bound the node has no free GPU; otherwise it has 4 less what the
    readable pods bound there ask (2 + 1)."""
    store = ClusterStore()
    store.replace(cluster_objects())
    store.fleet()
    events = _events()
    names = ["bad", "two", "one", "bad", "two"]
    bound: set[str] = set()
    for i in order:
        event = events[i]
        store.apply([event])
        name = names[i]
        if event.type == ADDED:
            bound.add(name)
        else:
            bound.discard(name)
        asked = {"two": 2, "one": 1}
        want = 0 if "bad" in bound else 4 - sum(asked[n] for n in bound)
        assert _free(store, "r1-t00") == want, (order, bound)
        assert any("pod ml/bad" in line for line in store.unreadable()) == ("bad" in bound)


def test_a_batch_of_watch_events_with_an_object_that_does_not_type_changes_nothing() -> None:
    """All or nothing: the events before the bad one are not applied either (nor left applied under an old
    version, which the store's cached lists and state would go on answering from)."""
    store = ClusterStore()
    store.replace(cluster_objects())
    version, before = store.version, _free(store, "r1-t02")
    broken = pod_json("broken", 1, node="r1-t03")
    broken["spec"]["containers"] = "oops"
    batch = [Event(ADDED, pod_json("first", 4, node="r1-t02")), Event(ADDED, broken)]
    with pytest.raises(InputError):
        store.apply(batch)
    assert store.version == version and store.pod_named("ml", "first") is None
    assert _free(store, "r1-t02") == before == 4

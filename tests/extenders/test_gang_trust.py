"""A gang's plan is for pods kilter's state holds (issue #17): a request body alone can neither hoard GPUs nor
take another gang's slots, nor make kilter write a plan record on a pod it names.

The fleet: two GB200 NVL72 racks (144 GPUs) and an MI355X node (8), 152 GPUs,
so one namespace's unadmitted gangs may hold 76 of them in open plans.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.serve import build_app
from kilter.gangs import GangBook, PlanRecorder
from tests.extenders.conftest import (
    Served,
    _Server,
    cluster_objects,
    names_args,
    pod_json,
    serve_config,
    serve_snapshot,
)
from tests.extenders.volcano.conftest import cluster_queue, quota_objects
from tests.fakeapi import Answer, Call, FakeApi, running
from tests.live_mode import kubeconfig, live_cluster, wait_ready

RACKS = [f"r{r}-t{t:02d}" for r in (1, 2) for t in range(18)]


def gang_pod(name: str, gang: str, size: int, *, namespace: str = "ml") -> dict[str, Any]:
    pod = pod_json(name, 4, labels={"kilter.dev/gang": gang, "kilter.dev/gang-size": str(size)})
    pod["metadata"]["namespace"] = namespace
    return pod


@pytest.fixture
def snapshot_served(tmp_path: Path) -> Iterator[Served]:
    with serve_snapshot(tmp_path) as served:
        yield served


def book(served: Served) -> GangBook:
    return served.app.extender.gangs


def test_a_pod_that_does_not_exist_cannot_reserve_more_than_its_namespace_cap(snapshot_served: Served) -> None:
    # 23 pods x 4 GPUs = 92 GPUs, over the cap of 152 // 2 = 76: refused before any plan is made.
    _, result = snapshot_served.post("filter", names_args(gang_pod("ghost-0", "hoard", 23), RACKS))
    assert result["NodeNames"] == []
    assert "more would pass its cap of 76" in result["FailedNodes"]["r1-t00"]
    assert book(snapshot_served).open_count() == 0 and book(snapshot_served).refused == 1
    assert snapshot_served.store.reservation("ml/gang/hoard") == ()
    _, single = snapshot_served.post("filter", names_args(pod_json("real", 4), RACKS))
    assert len(single["NodeNames"]) == 33  # 36 trays but the cordoned one and the two busy ones


@pytest.fixture
def live_served(tmp_path: Path) -> Iterator[Served]:
    """kilter listing and watching a live cluster; ``post`` sends bodies as given, for pods the API server lacks."""
    with live_cluster(tmp_path, cluster_objects()) as cluster:
        app, store = build_app(serve_config(None, kubeconfig=cluster.kubeconfig))
        with _Server(app, None) as port:
            wait_ready(store)
            yield Served(app, store, None, port)


def test_a_plan_for_a_pod_that_never_reaches_the_live_state_is_dropped_after_the_grace(live_served: Served) -> None:
    # A snapshot's state is minutes old: there the plan lives as long as any (test_snapshot_mode_trust).
    gangs = book(live_served)
    now = [0.0]
    gangs.clock = lambda: now[0]
    _, result = live_served.post("filter", names_args(gang_pod("ghost-0", "ghosts", 10), RACKS))
    assert len(result["NodeNames"]) == 10  # 40 GPUs: under the cap, planned (not recorded) for a while
    assert len(live_served.store.reservation("ml/gang/ghosts")) == 10
    now[0] = gangs.settings.limits.grace_s + 1
    live_served.post("filter", names_args(pod_json("real", 4), RACKS))
    _, again = live_served.post("filter", names_args(gang_pod("other-0", "other", 2), RACKS))  # expires plans
    assert gangs.unverified_dropped == 1 and not gangs.is_planned("ml/gang/ghosts")
    assert live_served.store.reservation("ml/gang/ghosts") == ()
    assert len(again["NodeNames"]) == 2


def test_pods_forged_with_another_gangs_labels_get_none_of_its_slots(tmp_path: Path) -> None:
    victims = [gang_pod(f"train-{i}", "train", 4) for i in range(4)]
    with serve_snapshot(tmp_path, [*cluster_objects(), *victims]) as served:
        _, first = served.post("filter", names_args(victims[0], RACKS))
        planned = first["NodeNames"]
        assert len(planned) == 4 and (p := book(served).plan_of("ml/gang/train")) is not None and p.verified
        for i in range(3):  # fakes kilter's state does not hold, claiming the gang, each filtered then bound
            fake = gang_pod(f"fake-{i}", "train", 4)
            _, held = served.post("filter", names_args(fake, planned))
            assert held["NodeNames"] == []
            assert "waits until kilter's state shows pod ml/fake-" in held["FailedNodes"][planned[0]]
            bound = {"PodName": f"fake-{i}", "PodNamespace": "ml", "PodUID": f"uid-fake-{i}", "Node": planned[i]}
            served.post("bind", bound)
        plan = book(served).plan_of("ml/gang/train")
        assert plan is not None
        assert [s.uid for s in plan.slots] == ["", "", "", ""]
        for victim in victims[1:]:
            _, result = served.post("filter", names_args(victim, RACKS))
            assert result["NodeNames"] == planned


def test_a_body_naming_a_pod_the_state_holds_under_another_uid_or_gang_gets_no_plan(tmp_path: Path) -> None:
    real = pod_json("solo", 4)  # a plain pod of the state, in no gang
    with serve_snapshot(tmp_path, [*cluster_objects(), real]) as served:
        forged = gang_pod("solo", "grab", 8)  # the same pod, claiming a gang of 8
        _, result = served.post("filter", names_args(forged, RACKS))
        assert len(result["NodeNames"]) == 33  # placed as the plain pod it is
        other_uid = gang_pod("solo", "grab", 8)
        other_uid["metadata"]["uid"] = "uid-forged"
        served.post("filter", names_args(other_uid, RACKS))
        assert book(served).open_count() == 0 and book(served).refused == 2


def test_twenty_thousand_made_up_gangs_keep_the_book_bounded(snapshot_served: Served) -> None:
    gangs = book(snapshot_served)
    conn = http.client.HTTPConnection("127.0.0.1", snapshot_served.port, timeout=30)
    try:
        for i in range(20_000):
            pod = gang_pod(f"g{i}-0", f"g{i}", 2, namespace=f"ns{i % 500}")
            conn.request("POST", "/scheduler/filter", json.dumps(names_args(pod, RACKS[:4])).encode())
            response = conn.getresponse()
            assert response.status == 200
            response.read()
    finally:
        conn.close()
    # Unseen pods count as one namespace: at most 32 plans of 2 pods x 4 GPUs (and 76 GPUs: 9 such plans).
    assert gangs.open_count() <= gangs.settings.limits.max_plans_per_namespace
    assert gangs.open_count() == 76 // 8
    assert gangs.refused == 20_000 - gangs.open_count()
    assert sum(len(snapshot_served.store.reservation(k)) for k in gangs.gang_keys()) == 2 * gangs.open_count()


# ---------------------------------------------------------------- plan records with an API server


@pytest.fixture
def api() -> Iterator[FakeApi]:
    def respond(call: Call) -> Answer:
        return 200, call.body

    with running(respond) as server:
        yield server


def test_a_forged_filter_makes_no_plan_record_on_the_pod_it_names(tmp_path: Path, api: FakeApi) -> None:
    real = gang_pod("real-0", "real", 2)
    config = {"kubeconfig": kubeconfig(tmp_path / "kubeconfig", api.port, "t")}
    with serve_snapshot(tmp_path, [*cluster_objects(), real], **config) as served:
        recorder = served.app.extender.gangs.on_planned.__self__  # type: ignore[union-attr]
        assert isinstance(recorder, PlanRecorder)
        served.post("filter", names_args(gang_pod("coredns-abc", "x", 2, namespace="kube-system"), RACKS))
        assert recorder.unverified == 1
        served.post("filter", names_args(real, RACKS))  # a pod the state holds: its gang's plan is recorded
        deadline = time.monotonic() + 10
        while recorder.written < 1:
            assert time.monotonic() < deadline, "the plan record was not written"
            time.sleep(0.02)
        patched = [c.path for c in api.calls if c.method == "PATCH"]
        assert patched == ["/api/v1/namespaces/ml/pods/real-0"]


def test_a_gang_may_not_ask_more_than_its_kueue_queue_could_ever_admit(tmp_path: Path) -> None:
    small = cluster_queue("small", 8, borrowing=0)  # 8 GPUs and nothing borrowed: potentialAvailable is 8
    local = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "q", "namespace": "ml"},
        "spec": {"clusterQueue": "small"},
    }
    queued = {"kueue.x-k8s.io/queue-name": "q"}
    big = [gang_pod(f"big-{i}", "big", 3) for i in range(3)]  # 3 x 4 = 12 GPUs
    fits = [gang_pod(f"fits-{i}", "fits", 2) for i in range(2)]  # 2 x 4 = 8 GPUs
    for pod in [*big, *fits]:
        pod["metadata"]["labels"].update(queued)
    with serve_snapshot(tmp_path, [*cluster_objects(), *quota_objects(), small, local, *big, *fits]) as served:
        _, refused = served.post("filter", names_args(big[0], RACKS))
        assert refused["NodeNames"] == []
        reason = "gang ml/gang/big asks 12 nvidia.com/gpu; ClusterQueue small could admit at most 8"
        assert refused["FailedNodes"]["r1-t00"].endswith(reason)
        _, planned = served.post("filter", names_args(fits[0], RACKS))
        assert len(planned["NodeNames"]) == 2
        assert book(served).gang_keys() == ["ml/gang/fits"]


@pytest.mark.parametrize(
    ("caps", "why"),
    [
        pytest.param({}, "", id="the defaults: no GPU cap on verified gangs, 32 plans hold both"),
        pytest.param({"max_namespace_gang_gpus": 30}, "more would pass its cap of 30", id="30 GPUs: 20 + 20 pass"),
        pytest.param({"max_namespace_gang_plans": 1}, "1 open gang plans, the most", id="one plan"),
    ],
)
def test_lowered_namespace_caps_refuse_a_second_gang_in_one_namespace(
    tmp_path: Path, caps: dict[str, int], why: str
) -> None:
    # Two gangs of 5 pods x 4 GPUs = 20 GPUs each, every pod in the state, no queue admitting either.
    first = [gang_pod(f"a-{i}", "a", 5) for i in range(5)]
    second = [gang_pod(f"b-{i}", "b", 5) for i in range(5)]
    with serve_snapshot(tmp_path, [*cluster_objects(), *first, *second], **caps) as served:
        _, planned = served.post("filter", names_args(first[0], RACKS))
        assert len(planned["NodeNames"]) == 5
        _, result = served.post("filter", names_args(second[0], RACKS))
        if not why:
            assert len(result["NodeNames"]) == 5 and set(book(served).gang_keys()) == {"ml/gang/a", "ml/gang/b"}
            return
        assert result["NodeNames"] == [] and why in result["FailedNodes"]["r1-t00"]
        assert set(book(served).gang_keys()) == {"ml/gang/a"} and book(served).refused == 1


@pytest.mark.parametrize(
    ("caps", "planned"),
    [
        pytest.param({}, 20, id="no cap by default: 80 GPUs, past half the fleet (76)"),
        pytest.param({"max_namespace_gang_gpus": 76}, 0, id="a cap set by flag holds it back"),
    ],
)
def test_a_verified_gang_may_take_more_than_half_the_fleet_unless_a_cap_is_set(
    tmp_path: Path, caps: dict[str, int], planned: int
) -> None:
    # One training job of 20 pods x 4 GPUs = 80 GPUs, every pod in the state: a real job, not a hoard.
    pods = [gang_pod(f"big-{i}", "big", 20) for i in range(20)]
    with serve_snapshot(tmp_path, [*cluster_objects(), *pods], **caps) as served:
        _, result = served.post("filter", names_args(pods[0], RACKS))
        assert len(result["NodeNames"]) == planned  # the planned nodes pass, nothing else
        assert book(served).open_count() == (1 if planned else 0)
        if planned:
            plan = book(served).plan_of("ml/gang/big")
            assert plan is not None and len(plan.slots) == planned

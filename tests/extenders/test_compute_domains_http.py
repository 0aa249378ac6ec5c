"""NVIDIA ComputeDomains through the scheduler extender over real HTTP, from a snapshot file and from list/watch.

The cluster is the scenario's two GB200 NVL72 racks (cliques ``r1`` and ``r2``; r1-t05 cordoned, r2-t00 full and
r2-t01 half used), so r2 is the best fit of a small gang: r1 has 17 idle trays, r2 16. A ComputeDomain's pods
name its ResourceClaimTemplate ``<name>-channel`` (and share a GPU claim that names no template).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.serve import build_app
from kilter.gangs import GangPlan
from kilter.model.annotations import COMPUTE_DOMAIN_SHARES_CLIQUES, COMPUTE_DOMAIN_SPANS_CLIQUES
from tests.extenders.conftest import (
    Served,
    _Server,
    cluster_objects,
    names_args,
    pod_json,
    serve_config,
    serve_snapshot,
)
from tests.extenders.test_extender_http import RACK1, RACK2, bind
from tests.gangs.cd_scenario import cd_pod, compute_domain
from tests.live_mode import live_cluster, settled, wait_ready
from tests.topology.builders import CLIQUE, TIER1, node_dict

EVERYTHING = [*RACK1, *RACK2]
MODES = pytest.mark.parametrize("mode", ["snapshot", "live"])
SPANS = {COMPUTE_DOMAIN_SPANS_CLIQUES: "true"}
SHARES = {COMPUTE_DOMAIN_SHARES_CLIQUES: "true"}


@contextmanager
def serving(mode: str, tmp_path: Path, objects: list[dict[str, Any]]) -> Iterator[Served]:
    """kilter serve over ``objects``: a snapshot file, or a live cluster it lists and watches."""
    if mode == "snapshot":
        with serve_snapshot(tmp_path, objects) as served:
            yield served
        return
    with live_cluster(tmp_path, objects) as cluster:
        app, store = build_app(serve_config(None, kubeconfig=cluster.kubeconfig))
        with _Server(app, None) as port:
            wait_ready(store)
            yield Served(app, store, None, port, cluster=cluster)


def domain(name: str, size: int, **kw: Any) -> list[dict[str, Any]]:
    """ComputeDomain ``name`` of ``numNodes: size`` and its ``size`` pods (``name-0`` ...)."""
    return [
        compute_domain(name, num_nodes=size, **kw),
        *(cd_pod(f"{name}-{i}", f"{name}-channel") for i in range(size)),
    ]


def plan_of(served: Served, key: str) -> GangPlan:
    plan = served.app.extender.gangs.plan_of(key)
    assert plan is not None
    return plan


def racks(plan: GangPlan) -> set[str]:
    return {s.node.split("-")[0] for s in plan.slots}


@MODES
def test_a_compute_domains_pods_are_one_gang_planned_into_one_clique_and_bound_there(mode: str, tmp_path: Path) -> None:
    with serving(mode, tmp_path, [*cluster_objects(), *domain("train", 12)]) as served:
        _, first = served.post("filter", names_args(cd_pod("train-0", "train-channel"), EVERYTHING))
        plan = plan_of(served, "ml/compute-domain/train")
        assert len(plan.slots) == 12 and racks(plan) == {"r2"}
        assert "ComputeDomain ml/train: one clique" in plan.plan.reason
        assert first["NodeNames"] == sorted({s.node for s in plan.slots})
        for i in range(12):
            pod = cd_pod(f"train-{i}", "train-channel")
            _, result = served.post("filter", names_args(pod, EVERYTHING))
            assert set(result["NodeNames"]) <= {s.node for s in plan.slots if not s.uid}
            assert bind(served, pod, result["NodeNames"][0]) == {"Error": ""}
        assert {s.node.split("-")[0] for s in plan.slots if s.uid} == {"r2"}


@MODES
def test_a_compute_domain_no_clique_can_hold_waits_rather_than_spread_over_two(mode: str, tmp_path: Path) -> None:
    # 20 pods x 4 GPUs: r1 holds 17 (t05 cordoned), r2 16; together they would hold all 20.
    ungrouped = [
        cd_pod(f"free-{i}", "no-such-domain", labels={"kilter.dev/gang": "free", "kilter.dev/gang-size": "20"})
        for i in range(20)
    ]
    with serving(mode, tmp_path, [*cluster_objects(), *domain("big", 20), *ungrouped]) as served:
        _, result = served.post("filter", names_args(cd_pod("big-0", "big-channel"), EVERYTHING))
        assert result["NodeNames"] == []
        why = result["FailedNodes"].get("r1-t00") or result["FailedAndUnresolvableNodes"]["r1-t00"]
        assert "requires one scale-up domain for 20 pods x 4 GPUs" in why and "ComputeDomain ml/big: one clique" in why
        # A gang whose pods claim a template no ComputeDomain names is planned as before, over both racks.
        _, free = served.post("filter", names_args(ungrouped[0], EVERYTHING))
        plan = plan_of(served, "ml/gang/free")
        assert plan.feasible and racks(plan) == {"r1", "r2"} and "ComputeDomain" not in plan.plan.reason
        assert len(free["NodeNames"]) == len({s.node for s in plan.slots})


@MODES
def test_a_compute_domain_that_spans_cliques_may_spread_over_two(mode: str, tmp_path: Path) -> None:
    with serving(mode, tmp_path, [*cluster_objects(), *domain("big", 20, annotations=SPANS)]) as served:
        served.post("filter", names_args(cd_pod("big-0", "big-channel"), EVERYTHING))
        plan = plan_of(served, "ml/compute-domain/big")
        assert plan.feasible and racks(plan) == {"r1", "r2"} and len(plan.slots) == 20


@MODES
def test_two_compute_domains_never_share_a_clique_planned_or_bound(mode: str, tmp_path: Path) -> None:
    objects = [*cluster_objects(), *domain("a", 4), *domain("b", 4), *domain("c", 4)]
    with serving(mode, tmp_path, objects) as served:
        served.post("filter", names_args(cd_pod("a-0", "a-channel"), EVERYTHING))
        a = plan_of(served, "ml/compute-domain/a")
        assert racks(a) == {"r2"}  # the best fit
        # b would fit r2 best too, but a's plan holds r2: b goes to r1.
        _, b_first = served.post("filter", names_args(cd_pod("b-0", "b-channel"), EVERYTHING))
        b = plan_of(served, "ml/compute-domain/b")
        assert racks(b) == {"r1"} and set(b_first["NodeNames"]) <= set(RACK1)
        assert "1 clique of other ComputeDomains left out" in b.plan.reason
        for i in range(4):  # a's pods bound: r2 is still a's
            pod = cd_pod(f"a-{i}", "a-channel")
            _, result = served.post("filter", names_args(pod, EVERYTHING))
            assert bind(served, pod, result["NodeNames"][0]) == {"Error": ""}
        # c: r2 holds a's pods, r1 b's plan; there is room in both, but no clique for c.
        _, c_first = served.post("filter", names_args(cd_pod("c-0", "c-channel"), EVERYTHING))
        assert c_first["NodeNames"] == []
        why = c_first["FailedNodes"].get("r1-t00") or c_first["FailedAndUnresolvableNodes"]["r1-t00"]
        assert "2 cliques of other ComputeDomains left out" in why


@MODES
def test_compute_domains_that_both_allow_it_may_share_a_clique(mode: str, tmp_path: Path) -> None:
    objects = [*cluster_objects(), *domain("a", 4, annotations=SHARES), *domain("b", 4, annotations=SHARES)]
    with serving(mode, tmp_path, objects) as served:
        served.post("filter", names_args(cd_pod("a-0", "a-channel"), EVERYTHING))
        served.post("filter", names_args(cd_pod("b-0", "b-channel"), EVERYTHING))
        assert racks(plan_of(served, "ml/compute-domain/a")) == racks(plan_of(served, "ml/compute-domain/b")) == {"r2"}


@pytest.mark.parametrize("spans", [False, True], ids=["held to its clique", "spans cliques"])
def test_a_late_pod_of_a_running_compute_domain_goes_nowhere_but_its_domains_clique(
    spans: bool, tmp_path: Path
) -> None:
    # numNodes 0: the gang is the pods the state holds, the late one among them. Two run in r1, whose other trays
    # are busy (t05 is cordoned), so a repair beside them would take r2.
    busy = [pod_json(f"busy-{t}", 4, node=f"r1-t{t:02d}") for t in range(2, 18) if t != 5]
    running = [cd_pod(f"run-{i}", "run-channel", node=f"r1-t0{i}") for i in range(2)]
    cd = compute_domain("run", annotations=SPANS if spans else None)
    late = cd_pod("run-2", "run-channel")
    with serving("snapshot", tmp_path, [*cluster_objects(), *busy, cd, *running, late]) as served:
        _, result = served.post("filter", names_args(late, EVERYTHING))
        plan = plan_of(served, "ml/compute-domain/run")
        assert plan.gang.size == 3
        if spans:
            assert racks(plan) == {"r2"} and result["NodeNames"] == [plan.slots[0].node]
        else:
            assert result["NodeNames"] == [] and "where its pods run: r1" in plan.plan.reason


@MODES
def test_a_job_set_whose_pods_join_a_compute_domain_keeps_its_key_and_gets_one_clique(
    mode: str, tmp_path: Path
) -> None:
    jobset = {"jobset.sigs.k8s.io/jobset-name": "js"}
    pods = [cd_pod(f"js-{i}", "js-channel", labels=jobset) for i in range(20)]
    with serving(mode, tmp_path, [*cluster_objects(), compute_domain("js"), *pods]) as served:
        _, result = served.post("filter", names_args(pods[0], EVERYTHING))
        plan = plan_of(served, "ml/jobset/js")
        assert not plan.feasible and "ComputeDomain ml/js: one clique" in plan.plan.reason
        assert result["NodeNames"] == []


def two_racks_one_clique_id() -> list[dict[str, Any]]:
    """Two NVL72 racks whose NVLink partitions both have clique id 1, under different cluster UUIDs."""
    out = []
    for uuid in ("7b968a6d-c8aa-45e1-9e07-e1e51be99c31", "3183419e-5c1d-4c1e-9b6d-d895a9fb06be"):
        out += [node_dict(f"{uuid[:4]}-t{t:02d}", labels={CLIQUE: f"{uuid}.1"}) for t in range(18)]
    return out


@pytest.mark.parametrize("spans", [False, True], ids=["one clique", "spans cliques"])
def test_one_clique_id_under_two_cluster_uuids_is_two_cliques(spans: bool, tmp_path: Path) -> None:
    nodes = two_racks_one_clique_id()
    names = [n["metadata"]["name"] for n in nodes]
    objects = [*nodes, *domain("big", 20, annotations=SPANS if spans else None)]
    with serving("snapshot", tmp_path, objects) as served:
        _, result = served.post("filter", names_args(cd_pod("big-0", "big-channel"), names))
        plan = plan_of(served, "ml/compute-domain/big")
        assert plan.feasible is spans  # 20 pods fit two racks of 18 trays, never "one" clique of 36
        if spans:
            assert {s.node[:4] for s in plan.slots} == {"7b96", "3183"} and len(plan.plan.domains) == 2
        else:
            assert result["NodeNames"] == [] and "holds 18 such pods" in plan.plan.reason


JOB_INDEX = "batch.kubernetes.io/job-completion-index"


def running_domain(*, spans: bool, busy_r2: range) -> list[dict[str, Any]]:
    """Gang ``train`` (8 indexed pods, ComputeDomain ``train``) running on r2-t02..t09 when r2-t03 fails: its pod
    is gone and the Job's replacement for index 1 waits. ``busy_r2`` trays of r2 run other pods."""
    gang = {"kilter.dev/gang": "train", "kilter.dev/gang-size": "8"}
    objects = [o for o in cluster_objects() if o["metadata"]["name"] != "r2-t03"]
    objects.append(node_dict("r2-t03", labels={CLIQUE: "r2", TIER1: "leaf-a"}, cordoned=True, ready=False))
    objects.append(compute_domain("train", annotations=SPANS if spans else None))
    for rank in range(8):
        name, node = (f"train-{rank}", f"r2-t{rank + 2:02d}") if rank != 1 else ("train-1-r", "")
        pod = cd_pod(name, "train-channel", labels=gang, node=node)
        pod["metadata"]["annotations"] = {JOB_INDEX: str(rank)}
        objects.append(pod)
    return [*objects, *(pod_json(f"busy-{t}", 4, node=f"r2-t{t:02d}") for t in busy_r2)]


def replacement() -> dict[str, Any]:
    return next(o for o in running_domain(spans=False, busy_r2=range(0)) if o["metadata"]["name"] == "train-1-r")


@MODES
def test_a_replacement_in_a_running_compute_domain_waits_for_room_in_its_clique_rather_than_leave_it(
    mode: str, tmp_path: Path
) -> None:
    # r2 is full (its other trays busy, t01 has 2 GPUs free): a repair would go to r1, outside the domain's clique.
    objects = running_domain(spans=False, busy_r2=range(10, 18))
    with serving(mode, tmp_path, objects) as served:
        _, result = served.post("filter", names_args(replacement(), EVERYTHING))
        assert result["NodeNames"] == []
        plan = plan_of(served, "ml/gang/train")
        assert not plan.feasible and plan.plan.reason.startswith("repair: ")
        assert "ComputeDomain ml/train: one clique; where its pods run: r2" in plan.plan.reason
        served.replace(running_domain(spans=False, busy_r2=range(11, 18)))  # r2-t10 comes free
        settled(lambda: served.store.pod("uid-busy-10") is None)  # a snapshot is re-read within 50 ms
        _, result = served.post("filter", names_args(replacement(), EVERYTHING))
        assert result["NodeNames"] == ["r2-t10"]


def test_a_replacement_in_a_compute_domain_that_spans_cliques_is_repaired_like_any_gang(tmp_path: Path) -> None:
    with serving("snapshot", tmp_path, running_domain(spans=True, busy_r2=range(10, 18))) as served:
        _, result = served.post("filter", names_args(replacement(), EVERYTHING))
        assert [n.split("-")[0] for n in result["NodeNames"]] == ["r1"]
        assert plan_of(served, "ml/gang/train").origin == "repair"

"""Six ways into the planner, one answer in one rank order: the extender, Volcano's verbs, the AdmissionCheck,
``kilter plan``, gRPC ``Plan`` and the simulator's kilter policy.

Every path plans through ``topology.plan`` (the simulator through
``plan_nodes``, the same decision without names), so on one fleet one gang
must get the same nodes, rank by rank. Where a path only shows a pod its own
node (the extender's filter, Volcano's predicate) each pod carries its rank
(``batch.kubernetes.io/job-completion-index``, or LeaderWorkerSet's worker
index) and the one node it passes is its rank's. A LeaderWorkerSet of two
groups is a job of two gangs: every path that takes it plans both, the
second beside the first. (A Kueue Workload is one gang: Kueue makes one per
LeaderWorkerSet group, so the AdmissionCheck meets the one-gang job only.)
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from kilter.api import placement_pb2 as pb
from kilter.cli.main import main
from kilter.cli.serve import build_app
from kilter.sim.gangs import Gang
from kilter.sim.simple import KilterPlacement
from kilter.state.cluster import from_objects
from kilter.topology.fleet import Fleet
from kilter.webhooks.admissioncheck import decide
from tests.api.serving import serving
from tests.extenders.conftest import Served, _Server, pod_json, serve_config, write_snapshot
from tests.extenders.volcano import payloads as vp
from tests.extenders.volcano.conftest import Volcano
from tests.test_one_placement import NODE_NAMES, fleet, volcano_node
from tests.webhooks.test_admissioncheck import CHECK, admission_check, workload

PODS, GPUS = 4, 4
INDEX = "batch.kubernetes.io/job-completion-index"
LWS = {
    "name": "leaderworkerset.sigs.k8s.io/name",
    "group": "leaderworkerset.sigs.k8s.io/group-index",
    "size": "leaderworkerset.sigs.k8s.io/size",
    "worker": "leaderworkerset.sigs.k8s.io/worker-index",
}

Ranked = list[list[str]]  # per gang, its nodes in rank order


# ---------------------------------------------------------------------- the jobs, as each path is handed them


def indexed_job() -> dict[str, Any]:
    """The one-gang job: an Indexed batch Job of four 4-GPU pods."""
    template = {"metadata": {}, "spec": copy.deepcopy(pod_json("t", GPUS)["spec"])}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"parallelism": PODS, "completions": PODS, "completionMode": "Indexed", "template": template},
    }


def lws_job() -> dict[str, Any]:
    """The two-gang job: a LeaderWorkerSet of two groups, a leader and three workers each, all 4-GPU pods."""
    template = {"metadata": {}, "spec": copy.deepcopy(pod_json("t", GPUS)["spec"])}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "serve", "namespace": "ml"},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": PODS, "workerTemplate": template}},
    }


def indexed_pods() -> list[dict[str, Any]]:
    """The one-gang job's pods as the extender sees them: kilter's gang labels and each pod's completion index."""
    labels = {"kilter.dev/gang": "train", "kilter.dev/gang-size": str(PODS)}
    return [pod_json(f"train-{i}", GPUS, labels=labels, annotations={INDEX: str(i)}) for i in range(PODS)]


def lws_labels(group: int, worker: int) -> dict[str, str]:
    return {LWS["name"]: "serve", LWS["group"]: str(group), LWS["size"]: str(PODS), LWS["worker"]: str(worker)}


def lws_pods() -> list[dict[str, Any]]:
    """The two-gang job's pods as the LeaderWorkerSet controller labels them, group after group."""
    return [pod_json(f"serve-{g}-{w}", GPUS, labels=lws_labels(g, w)) for g in range(2) for w in range(PODS)]


# ---------------------------------------------------------------------- each path's answer, in rank order


def passing_node(passed: list[str]) -> str:
    assert len(passed) == 1, passed  # a ranked pod passes only its rank's node
    return passed[0]


def extender_ranks(tmp_path: Path, pods: list[dict[str, Any]], gangs: int) -> Ranked:
    """kube-scheduler's filter of each pod, in rank order, over every node: the one node each passes."""
    snapshot = tmp_path / "extender.json"
    write_snapshot(snapshot, [*fleet(), *pods])
    app, store = build_app(serve_config(snapshot))
    nodes: list[str] = []
    with _Server(app, None) as port:
        served = Served(app, store, snapshot, port)
        for pod in pods:
            status, result = served.post("filter", {"Pod": pod, "Nodes": None, "NodeNames": NODE_NAMES})
            assert status == 200 and result["Error"] == ""
            nodes.append(passing_node(result["NodeNames"]))
    return [nodes[g * PODS : (g + 1) * PODS] for g in range(gangs)]


def volcano_ranks(tmp_path: Path, groups: list[list[dict[str, Any]]]) -> Ranked:
    """Volcano's predicate for each task of each PodGroup (a gang of ``PODS``), node by node: the one it passes."""
    snapshot = tmp_path / "volcano.json"
    write_snapshot(snapshot, fleet())
    jobs = []
    for g, pods in enumerate(groups):
        tasks = []
        for pod in pods:
            meta = pod["metadata"]
            labels, notes = meta.get("labels", {}), meta.get("annotations", {})
            task = vp.pod(
                "ml",
                meta["name"],
                f"uid-{meta['name']}",
                gpus=GPUS,
                group=f"group-{g}",
                labels=labels,
                annotations=notes,
            )
            tasks.append(vp.task_info(task))
        jobs.append(vp.job_info("ml", f"group-{g}", queue="default", min_available=PODS, tasks=tasks))
    app, _ = build_app(serve_config(snapshot))
    out: Ranked = []
    with _Server(app, None) as port:
        volcano = Volcano(app, port)
        assert volcano.post("onSessionOpen", vp.session_open_args(jobs, [], [vp.queue_info("default")]))[0] == 200
        for job, pods in zip(jobs, groups, strict=True):
            by_name = {t["Name"]: t for t in job["Tasks"].values()}
            ranked = []
            for pod in pods:
                task = by_name[pod["metadata"]["name"]]
                passed = [
                    n
                    for n in NODE_NAMES
                    if volcano.post("predicate", vp.predicate_args(task, volcano_node(n)))[1]["code"] == vp.SUCCESS
                ]
                ranked.append(passing_node(passed))
            out.append(ranked)
    return out


def admission_check_ranks() -> Ranked:
    """The nodes the kilter.dev/topology AdmissionCheck plans for the one-gang job as a Kueue Workload."""
    state = from_objects([*fleet(), admission_check(CHECK, "kilter.dev/topology"), workload("train", PODS)])
    decisions = decide(state, state.fleet(), state.idle_fleet())
    assert [d.state for d in decisions] == ["Ready"]
    plan = decisions[0].plan
    assert plan is not None
    return [[n for ps in plan.pod_sets for n in ps.nodes]]


def plan_dict_ranks(plan: dict[str, Any]) -> Ranked:
    assert plan["feasible"], plan["reason"]
    return [[n for ps in gang["podSets"] for n in ps["nodes"]] for gang in plan["gangs"]]


def kilter_plan_ranks(tmp_path: Path, capsys: pytest.CaptureFixture[str], job: dict[str, Any]) -> Ranked:
    """``kilter plan -o json`` of the job on a snapshot of the fleet: each gang's pod sets' nodes, in order."""
    snapshot, job_file = tmp_path / "plan.json", tmp_path / "job.json"
    write_snapshot(snapshot, fleet())
    job_file.write_text(json.dumps(job))
    capsys.readouterr()
    assert main(["plan", "--job", str(job_file), "--snapshot", str(snapshot), "-o", "json"]) == 0
    return plan_dict_ranks(json.loads(capsys.readouterr().out))


@pytest.fixture(scope="module")
def grpc_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """kilter serve over the fleet with its gRPC listener on 127.0.0.1."""
    with serving(tmp_path_factory.mktemp("grpc"), objects=fleet()) as served:
        yield served


def grpc_ranks(served: Any, job: dict[str, Any]) -> Ranked:
    """gRPC ``Plan`` of the job over a real socket."""
    answer = served.stub().Plan(pb.PlanRequest(job=yaml.safe_dump(job).encode()))
    return plan_dict_ranks(json.loads(answer.plan_json))


def simulator_ranks(gangs: list[tuple[tuple[int, int], ...]]) -> Ranked:
    """The simulator's kilter policy on the same fleet, gang after gang, each booked before the next (as the
    simulator books a started gang)."""
    fl: Fleet = from_objects(fleet()).fleet()
    platform = next(i for i, p in enumerate(fl.platforms) if p.name.startswith("GB200"))
    policy = KilterPlacement()
    out: Ranked = []
    for job, pod_sets in enumerate(gangs):
        nodes = policy.place(fl, Gang(job, platform, pod_sets, "preferred"))
        assert nodes is not None
        gpus = [g for count, g in pod_sets for _ in range(count)]
        for node, g in zip(np.asarray(nodes).tolist(), gpus, strict=True):
            fl.bitmap.allocate(node, g)
        out.append([fl.node_names[n] for n in np.asarray(nodes).tolist()])
    return out


# ---------------------------------------------------------------------- the tests


def test_one_gang_gets_the_same_nodes_in_the_same_rank_order_on_every_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], grpc_server: Any
) -> None:
    planned = kilter_plan_ranks(tmp_path, capsys, indexed_job())
    assert len(planned) == 1 and len(planned[0]) == PODS and len(set(planned[0])) == PODS
    assert all(n.startswith("r2-") for n in planned[0])  # best fit: the smaller rack
    assert grpc_ranks(grpc_server, indexed_job()) == planned
    assert admission_check_ranks() == planned
    assert simulator_ranks([((PODS, GPUS),)]) == planned
    assert extender_ranks(tmp_path, indexed_pods(), 1) == planned
    assert volcano_ranks(tmp_path, [indexed_pods()]) == planned


def test_every_gang_of_a_two_gang_job_is_planned_beside_the_first_on_every_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], grpc_server: Any
) -> None:
    planned = kilter_plan_ranks(tmp_path, capsys, lws_job())
    assert len(planned) == 2 and all(len(g) == PODS for g in planned)
    assert not set(planned[0]) & set(planned[1])  # whole trays: the second gang beside the first, not on it
    assert grpc_ranks(grpc_server, lws_job()) == planned
    assert simulator_ranks([((1, GPUS), (PODS - 1, GPUS))] * 2) == planned
    pods = lws_pods()
    extender = extender_ranks(tmp_path, pods, 2)
    assert volcano_ranks(tmp_path, [pods[:PODS], pods[PODS:]]) == extender
    # The servers see the group's pods, four alike, as one pod set (worker index = rank); the job object names
    # a leader pod set and a workers one, each in rank order. Each gang gets the same nodes either way.
    assert [sorted(g) for g in extender] == [sorted(g) for g in planned]


def test_a_gang_no_path_can_place_is_refused_for_the_same_reason_on_every_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], grpc_server: Any
) -> None:
    pods = 40  # 160 GPUs: the two racks' 33 free, healthy trays in the pool hold 33 such pods
    job = indexed_job()
    job["spec"]["parallelism"] = job["spec"]["completions"] = pods
    why = "pod set main needs 40 pods x 4 GPUs; idle, healthy GB200-NVL72 nodes hold 33 such pods"
    snapshot, job_file = tmp_path / "plan.json", tmp_path / "job.json"
    write_snapshot(snapshot, fleet())
    job_file.write_text(json.dumps(job))
    capsys.readouterr()
    main(["plan", "--job", str(job_file), "--snapshot", str(snapshot), "-o", "json"])
    planned = json.loads(capsys.readouterr().out)
    assert not planned["feasible"] and [g["reason"] for g in planned["gangs"]] == [why]
    answer = json.loads(grpc_server.stub().Plan(pb.PlanRequest(job=yaml.safe_dump(job).encode())).plan_json)
    assert answer == planned
    state = from_objects([*fleet(), admission_check(CHECK, "kilter.dev/topology"), workload("train", pods)])
    (decision,) = decide(state, state.fleet(), state.idle_fleet())
    assert (decision.state, decision.message) == ("Rejected", f"can never fit this fleet: {why}")
    fl: Fleet = from_objects(fleet()).fleet()
    platform = next(i for i, p in enumerate(fl.platforms) if p.name.startswith("GB200"))
    assert KilterPlacement().place(fl, Gang(0, platform, ((pods, GPUS),), "preferred")) is None

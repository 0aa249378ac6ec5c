"""One gang, four ways in: the kube-scheduler extender, Volcano's verbs, the AdmissionCheck and ``kilter plan``.

Every path that places reaches the same planner and the same verdict ladder,
so on the same fleet the same gang must land on the same nodes, and a node
either server turns down must be turned down for the same reason. The gang's
key is the one thing that differs (``ml/gang/train`` for labelled pods,
``ml/podgroup/train`` for Volcano's job), and it is written into the plan's
description; it is replaced by ``<gang>`` before reasons are compared.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.main import main
from kilter.cli.serve import build_app
from kilter.state.cluster import from_objects
from kilter.webhooks.admissioncheck import decide
from tests.extenders.conftest import Served, _Server, cluster_objects, pod_json, serve_config, write_snapshot
from tests.extenders.volcano import payloads as vp
from tests.extenders.volcano.conftest import Volcano
from tests.webhooks.test_admissioncheck import CHECK, admission_check, workload

POOL = "example.com/pool"
PODS, GPUS = 4, 4
SELECTOR = {POOL: "a"}
KEYS = {"ml/gang/train", "ml/podgroup/train", "ml/workload/train"}


def fleet() -> list[dict[str, Any]]:
    """Two NVL72 racks (r1-t05 cordoned, r2-t00 full, r2-t01 half used) with r2-t09..t17 in pool b; MI355X; CPU."""
    objects = [o for o in cluster_objects() if o["kind"] == "Node"]
    for obj in objects:
        name = obj["metadata"]["name"]
        if name.startswith(("r1-", "r2-")):
            obj["metadata"]["labels"][POOL] = "b" if name >= "r2-t09" and name.startswith("r2-") else "a"
    used = [pod_json("busy", 4, node="r2-t00"), pod_json("half", 2, node="r2-t01")]
    return [*objects, *used]


NODE_NAMES = [*sorted(o["metadata"]["name"] for o in fleet() if o["kind"] == "Node"), "nowhere"]
USED = {"r2-t00": 4, "r2-t01": 2}


def gang_pods() -> list[dict[str, Any]]:
    """The gang as labelled pods, pending, each asking 4 GPUs and selecting pool a."""
    labels = {"kilter.dev/gang": "train", "kilter.dev/gang-size": str(PODS)}
    pods = []
    for i in range(PODS):
        pod = pod_json(f"train-{i}", GPUS, labels=labels)
        pod["spec"]["nodeSelector"] = SELECTOR
        pods.append(pod)
    return pods


def normal(reason: str) -> str:
    for key in KEYS:
        reason = reason.replace(key, "<gang>")
    return reason


def extender_answer(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """kube-scheduler's filter of the gang's first pod over every node: the nodes it passes, and why others fail."""
    snapshot = tmp_path / "extender.json"
    pods = gang_pods()
    write_snapshot(snapshot, [*fleet(), *pods])
    app, store = build_app(serve_config(snapshot))
    with _Server(app, None) as port:
        status, result = Served(app, store, snapshot, port).post(
            "filter", {"Pod": pods[0], "Nodes": None, "NodeNames": NODE_NAMES}
        )
    assert status == 200 and result["Error"] == ""
    failed = {**result["FailedNodes"], **result["FailedAndUnresolvableNodes"]}
    return sorted(result["NodeNames"]), {n: normal(r) for n, r in failed.items()}


def volcano_node(name: str) -> dict[str, Any]:
    if name.startswith(("r1-", "r2-")):
        labels = {"nvidia.com/gpu.clique": name.split("-")[0], POOL: "b" if name >= "r2-t09" else "a"}
        return vp.node_info(name, gpus=4, used_gpus=USED.get(name, 0), labels=labels)
    return vp.node_info(name, gpus=0)


def volcano_answer(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """Volcano's predicate for the first task of the same gang as a PodGroup job, node by node."""
    snapshot = tmp_path / "volcano.json"
    write_snapshot(snapshot, fleet())
    tasks = []
    for i in range(PODS):
        pod = vp.pod("ml", f"train-{i}", f"uid-train-{i}", gpus=GPUS, group="train")
        pod["spec"]["nodeSelector"] = SELECTOR
        tasks.append(vp.task_info(pod))
    job = vp.job_info("ml", "train", queue="default", min_available=PODS, tasks=tasks)
    first = next(t for t in job["Tasks"].values() if t["Name"] == "train-0")
    app, _ = build_app(serve_config(snapshot))
    passed, failed = [], {}
    with _Server(app, None) as port:
        volcano = Volcano(app, port)
        assert volcano.post("onSessionOpen", vp.session_open_args([job], [], [vp.queue_info("default")]))[0] == 200
        for name in NODE_NAMES:
            answer = volcano.post("predicate", vp.predicate_args(first, volcano_node(name)))[1]
            if answer["code"] == vp.SUCCESS:
                passed.append(name)
            else:
                failed[name] = normal(answer["status"])
    return sorted(passed), failed


def admission_check_nodes() -> list[str]:
    """The nodes the kilter.dev/topology AdmissionCheck plans for the gang as a Kueue Workload."""
    wl = workload("train", PODS)
    wl["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] = SELECTOR
    state = from_objects([*fleet(), admission_check(CHECK, "kilter.dev/topology"), wl])
    decisions = decide(state, state.fleet(), state.idle_fleet())
    assert [d.state for d in decisions] == ["Ready"]
    plan = decisions[0].plan
    assert plan is not None
    return sorted(n for ps in plan.pod_sets for n in ps.nodes)


def kilter_plan_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """``kilter plan`` of the gang as a batch Job of 4 pods, on the same fleet."""
    snapshot, job_file = tmp_path / "plan.json", tmp_path / "job.json"
    write_snapshot(snapshot, fleet())
    template = copy.deepcopy({"metadata": {}, "spec": gang_pods()[0]["spec"]})
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"parallelism": PODS, "completions": PODS, "completionMode": "Indexed", "template": template},
    }
    job_file.write_text(json.dumps(job))
    capsys.readouterr()
    assert main(["plan", "--job", str(job_file), "--snapshot", str(snapshot), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    return sorted(n for ps in out["podSets"] for n in ps["nodes"])


def test_every_path_places_the_gang_on_the_same_nodes_and_rejects_the_rest_for_the_same_reasons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extender_nodes, extender_reasons = extender_answer(tmp_path)
    volcano_nodes, volcano_reasons = volcano_answer(tmp_path)
    planned = kilter_plan_nodes(tmp_path, capsys)
    assert len(planned) == PODS and all(n.startswith("r2-") for n in planned)  # best fit: the smaller eligible rack
    assert extender_nodes == volcano_nodes == admission_check_nodes() == planned
    assert extender_reasons == volcano_reasons
    # Every rung that can turn a gang pod down was met, so the comparison covered each of them.
    assert extender_reasons["nowhere"] == extender_reasons["cpu-1"] == "not a GPU node in kilter's model of the fleet"
    assert extender_reasons["mi-1"] == "the node's GPUs are not nvidia.com/gpu"
    assert extender_reasons["r1-t05"] == "the node is cordoned, not Ready, or its GPUs are unhealthy"
    assert extender_reasons["r2-t12"] == "the pod's nodeSelector, node affinity or tolerations exclude the node"
    assert extender_reasons["r1-t00"].startswith("kilter holds this pod to its gang's plan (gang <gang>: ")
    assert set(extender_reasons) == set(NODE_NAMES) - set(planned)

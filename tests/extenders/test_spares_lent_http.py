"""Spares lent to preemptible pods and taken back by a repair, over real HTTP on 127.0.0.1.

Two GB200 NVL72 racks ``r1`` and ``r2`` (18 trays of 4 GPUs); the
ResourceFlavor ``gb200`` keeps 2 spare trays a rack and says whether it lends
them (``kilter.dev/spares-for-preemptible``). The gang ``train`` (16 pods,
priority 100, Job completion indices 0-15) runs on r1-t00..t15, as kilter
planned it: r1's spares are t16 and t17. Rack r2 is full of priority-1000
inference pods, so a repair of ``train`` has nowhere to go but r1.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kilter.gangs.records import PLAN_ANNOTATION, PlanRecord, encode
from kilter.model.annotations import SPARES_FOR_PREEMPTIBLE
from tests.extenders.conftest import Served, names_args, pod_json
from tests.extenders.test_gang_repair_http import JOB_INDEX, KEYS, explained, serving
from tests.extenders.test_spares_http import flavor, metric
from tests.listwatch import PDBS
from tests.live_mode import settled
from tests.topology.builders import CLIQUE, TIER1, node_dict

GANG = {"kilter.dev/gang": "train", "kilter.dev/gang-size": "16"}
NODES = [f"{r}-t{t:02d}" for r in ("r1", "r2") for t in range(18)]
RANK_NODE = NODES[:16]
TRAIN, SCAVENGER, INFERENCE = 100, 10, 1000


def with_priority(pod: dict[str, Any], priority: int) -> dict[str, Any]:
    pod["spec"]["priority"] = priority  # what the Priority admission plugin writes from the PriorityClass
    return pod


def ready(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod Running and Ready, as the kubelet reports it: what a disruption budget counts as healthy."""
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return pod


def member(rank: int, *, replacement: bool = False, size: int = 16) -> dict[str, Any]:
    name = f"train-{rank}" + ("-r" if replacement else "")
    node = "" if replacement else RANK_NODE[rank]
    labels = {**GANG, "kilter.dev/gang-size": str(size)}
    pod = with_priority(pod_json(name, 4, labels=labels, annotations={JOB_INDEX: str(rank)}, node=node), TRAIN)
    if not replacement:
        record = PlanRecord("ml/gang/train", time.time() - 86400, tuple((n, 4) for n in RANK_NODE[:size]))
        pod["metadata"]["annotations"][PLAN_ANNOTATION] = encode(record, keys=KEYS, uid=pod["metadata"]["uid"])
    return pod


def lending(value: str | None) -> dict[str, Any]:
    rf = flavor("2")
    if value is not None:
        rf["metadata"]["annotations"][SPARES_FOR_PREEMPTIBLE] = value
    return rf


def cluster(
    lends: str | None, *, failed: str = "", borrowers: tuple[str, ...] = (), sweep: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """The racks; ``sweep``: the last trays of the gang's that a second, lower-priority gang runs on instead (the
    gang ``train`` is that much smaller)."""
    nodes = [
        node_dict(n, labels={CLIQUE: n[:2], TIER1: "leaf-a"}, cordoned=n == failed, ready=n != failed) for n in NODES
    ]
    size = 16 - len(sweep)
    low = {"kilter.dev/gang": "sweep", "kilter.dev/gang-size": str(len(sweep))}
    gang = [member(r, size=size) for r in range(size) if RANK_NODE[r] != failed]
    gang += [with_priority(pod_json(f"sweep-{n}", 4, labels=low, node=n), 50) for n in sweep]
    inference = [with_priority(pod_json(f"serve-{n}", 4, node=n), INFERENCE) for n in NODES[18:]]
    scavengers = [
        ready(with_priority(pod_json(f"scavenge-{n}", 4, node=n, labels={"app": "scavenge"}), SCAVENGER))
        for n in borrowers
    ]
    replacement = [member(RANK_NODE.index(failed), replacement=True, size=size)] if failed else []
    return [*nodes, *gang, *inference, *scavengers, *replacement, lending(lends)]


def filtered(served: Served, pod: dict[str, Any]) -> dict[str, Any]:
    status, answer = served.post("filter", names_args(pod, NODES))
    assert status == 200 and isinstance(answer, dict) and answer["Error"] == "", answer
    return answer


@pytest.mark.parametrize("lends", ["true", "false", None], ids=["lent", "kept", "unset"])
@pytest.mark.parametrize("mode", ["snapshot", "live"])
def test_a_lone_pod_below_every_gang_in_the_rack_may_borrow_its_spares_only_where_they_are_lent(
    lends: str | None, mode: str, tmp_path: Path
) -> None:
    with serving(mode, tmp_path, cluster(lends)) as served:
        scavenger = filtered(served, with_priority(pod_json("scavenge", 4), SCAVENGER))
        urgent = filtered(served, with_priority(pod_json("urgent", 4), 500))  # above the gang: no borrower
        spares = {"r1-t16", "r1-t17"}
        assert spares <= set(scavenger["NodeNames"]) if lends == "true" else not spares & set(scavenger["NodeNames"])
        assert not spares & set(urgent["NodeNames"])
        assert "kept spare for repairs" in urgent["FailedAndUnresolvableNodes"]["r1-t16"]
        assert metric(served, "kilter_spare_nodes_held") == 2.0  # r2 is full: only r1 holds its two
        assert metric(served, "kilter_spare_domains_lent") == (2.0 if lends == "true" else 0.0)


@pytest.mark.parametrize("lends", ["true", "false"])
def test_a_gang_below_the_racks_gangs_may_be_planned_onto_lent_spares(lends: str, tmp_path: Path) -> None:
    low = {"kilter.dev/gang": "sweep", "kilter.dev/gang-size": "2"}
    pods = [with_priority(pod_json(f"sweep-{i}", 4, labels=low), SCAVENGER) for i in range(2)]
    with serving("snapshot", tmp_path, [*cluster(lends), *pods]) as served:
        answer = filtered(served, pods[0])
        if lends == "true":
            assert set(answer["NodeNames"]) == planned(served, "sweep") == {"r1-t16", "r1-t17"}
        else:  # the two idle trays are r1's spares: the gang does not fit and waits
            assert answer["NodeNames"] == [] and not planned(served, "sweep")
            assert "spare nodes kept out of new plans" in answer["FailedNodes"]["r1-t16"]


def planned(served: Served, gang: str) -> set[str]:
    return {held.node for held in served.store.reservation(f"ml/gang/{gang}")}


@pytest.mark.parametrize("mode", ["snapshot", "live"])
def test_a_repair_takes_a_lent_spare_back_through_the_schedulers_preemption(mode: str, tmp_path: Path) -> None:
    objects = cluster("true", failed="r1-t03", borrowers=("r1-t16", "r1-t17"))
    with serving(mode, tmp_path, objects) as served:
        replacement = member(3, replacement=True)
        # No node has 4 GPUs free, so kube-scheduler's own filters pass none, it asks no extender to filter, and
        # its preemption offers the nodes where evicting lower-priority pods would make room: the borrowed spares.
        body = {
            "Pod": replacement,
            "NodeNameToVictims": None,
            "NodeNameToMetaVictims": {
                "r1-t16": {"Pods": [{"UID": "uid-scavenge-r1-t16"}], "NumPDBViolations": 0},
                "r1-t17": {"Pods": [{"UID": "uid-scavenge-r1-t17"}], "NumPDBViolations": 0},
            },
        }
        status, result = served.post("preempt", body)
        assert status == 200
        # The repair plans rank 3 onto the first borrowed spare; only that node and its victim are kept.
        assert result["NodeNameToMetaVictims"] == {
            "r1-t16": {"Pods": [{"UID": "uid-scavenge-r1-t16"}], "NumPDBViolations": 0}
        }
        assert (p := served.app.extender.gangs.plan_of("ml/gang/train")) is not None and p.origin == "repair"
        held = served.store.reservation("ml/gang/train")  # the victim holds the GPUs until it is evicted: live,
        victim_gone = served.store.pod("uid-scavenge-r1-t16") is None  # kilter's own eviction may land first
        assert not held or (mode == "live" and victim_gone and [h.node for h in held] == ["r1-t16"]), held
        assert filtered(served, replacement)["NodeNames"] == ["r1-t16"]  # the plan's node, whatever is offered
        assert "lent spare taken back" in explained(served, "train-3-r")
        if mode == "live":  # the victim is evicted (kilter evicts it too); the replacement binds where the repair said
            settled(lambda: served.store.pod("uid-scavenge-r1-t16") is None)
            assert filtered(served, replacement)["NodeNames"] == ["r1-t16"]
            meta = replacement["metadata"]
            bind = {"PodName": meta["name"], "PodNamespace": "ml", "PodUID": meta["uid"], "Node": "r1-t16"}
            status, bound = served.post("bind", bind)
            assert status == 200 and bound == {"Error": ""}, bound


def test_a_repair_takes_back_only_what_lending_let_in_never_another_gangs_node(tmp_path: Path) -> None:
    # A second gang (priority 50, below train's 100) runs on r1-t14 and r1-t15. Its trays come first by index and
    # would free as much; but only pods below every gang in the rack were let onto the spares, so only those go.
    objects = cluster("true", failed="r1-t03", borrowers=("r1-t16", "r1-t17"), sweep=("r1-t14", "r1-t15"))
    with serving("snapshot", tmp_path, objects) as served:
        replacement = member(3, replacement=True, size=14)
        victims = {
            n: {"Pods": [{"UID": f"uid-{who}-{n}"}], "NumPDBViolations": 0}
            for n, who in (("r1-t14", "sweep"), ("r1-t16", "scavenge"), ("r1-t17", "scavenge"))
        }
        body = {"Pod": replacement, "NodeNameToVictims": None, "NodeNameToMetaVictims": victims}
        status, result = served.post("preempt", body)
        assert status == 200 and list(result["NodeNameToMetaVictims"]) == ["r1-t16"]


def test_a_pod_above_the_racks_gangs_gets_no_borrower_evicted_for_a_spare_it_may_not_use(tmp_path: Path) -> None:
    # Without the spares rule, kube-scheduler's preemption would evict the borrower on r1-t16 for this priority-500
    # pod, and the emptied tray would be a spare the pod is refused: the borrower killed for nothing.
    objects = cluster("true", borrowers=("r1-t16", "r1-t17"))
    with serving("snapshot", tmp_path, objects) as served:
        urgent = with_priority(pod_json("urgent", 4), 500)
        body = {
            "Pod": urgent,
            "NodeNameToVictims": None,
            "NodeNameToMetaVictims": {"r1-t16": {"Pods": [{"UID": "uid-scavenge-r1-t16"}], "NumPDBViolations": 0}},
        }
        status, result = served.post("preempt", body)
        assert status == 200 and result["NodeNameToMetaVictims"] == {}
        assert "empties a spare node kept for repairs" in explained(served, "urgent")


def budget(allowed: int) -> dict[str, Any]:
    """The scavengers' PodDisruptionBudget with its status as the disruption controller keeps it: ``allowed`` 1, one
    of two healthy pods may go; 0, both must stay and one is unhealthy already (so an unready pod is no exception)."""
    healthy, desired = 1 + allowed, 2 - allowed
    status = {
        "observedGeneration": 1,
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
    }
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "scavenge", "namespace": "ml", "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": "scavenge"}}, "minAvailable": desired},
        "status": status,
    }


@pytest.mark.parametrize("allowed", [1, 0], ids=["budget allows one", "budget allows none"])
def test_kilter_evicts_the_borrower_itself_within_its_disruption_budget(allowed: int, tmp_path: Path) -> None:
    # kube-scheduler's preemption samples candidate nodes and may not offer the one the repair chose, so kilter
    # evicts the borrower through the Eviction API when it plans the repair; a budget that refuses is respected.
    objects = [*cluster("true", failed="r1-t03", borrowers=("r1-t16", "r1-t17")), budget(allowed)]
    with serving("live", tmp_path, objects) as served:
        assert served.cluster is not None
        recorder = served.app.extender.gangs.on_planned.__self__  # type: ignore[union-attr]
        replacement = member(3, replacement=True)
        assert filtered(served, replacement)["NodeNames"] == ["r1-t16"]  # the repair is planned at this filter
        if allowed:
            settled(lambda: served.store.pod("uid-scavenge-r1-t16") is None)
            assert served.store.pod("uid-scavenge-r1-t17") is not None  # one tray freed is enough
            spent = served.cluster.server.objects(PDBS)[0]["status"]  # the eviction went through the budget
            assert spent["disruptionsAllowed"] == 0 and list(spent["disruptedPods"]) == ["scavenge-r1-t16"]
            # The freed tray is held for the repair as soon as the borrower's deletion reaches kilter
            settled(lambda: [h.node for h in served.store.reservation("ml/gang/train")] == ["r1-t16"])
            assert filtered(served, replacement)["NodeNames"] == ["r1-t16"]
            meta = replacement["metadata"]
            bind = {"PodName": meta["name"], "PodNamespace": "ml", "PodUID": meta["uid"], "Node": "r1-t16"}
            status, bound = served.post("bind", bind)
            assert status == 200 and bound == {"Error": ""}, bound
        else:
            settled(lambda: recorder.not_evicted == 1)
            assert served.store.pod("uid-scavenge-r1-t16") is not None and recorder.evicted == 0


def test_without_lending_the_same_repair_finds_no_node_and_preempts_nobody(tmp_path: Path) -> None:
    # The scavengers were bound before the setting (or by another scheduler): not lent, so not taken back.
    objects = cluster("false", failed="r1-t03", borrowers=("r1-t16", "r1-t17"))
    with serving("snapshot", tmp_path, objects) as served:
        answer = filtered(served, member(3, replacement=True))
        assert answer["NodeNames"] == []
        assert "finds no usable" in answer["FailedNodes"]["r1-t16"]

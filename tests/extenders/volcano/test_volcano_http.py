"""Volcano's extender-plugin verbs over real HTTP, with bodies shaped as Volcano v1.13 and HEAD send them."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kilter.extenders.volcano import VOLCANO_VERBS
from tests.extenders.volcano import payloads as vp
from tests.extenders.volcano.conftest import Volcano, gpu_job, open_session, serve, task_of
from tests.topology.builders import CLIQUE

R1 = [f"r1-t{t:02d}" for t in range(18)]
R2 = [f"r2-t{t:02d}" for t in range(18)]


def node(name: str, *, used: int = 0) -> dict[str, Any]:
    rack = name.split("-")[0]
    return vp.node_info(name, gpus=4, used_gpus=used, labels={CLIQUE: rack})


def predicate(v: Volcano, task: dict[str, Any], name: str, *, used: int = 0) -> tuple[int, str]:
    status, body = v.post("predicate", vp.predicate_args(task, node(name, used=used)))
    assert status == 200
    assert set(body) == {"status", "code"}
    return body["code"], body["status"]


# ---------------------------------------------------------------------- paths


def test_every_verb_is_served_and_others_are_not(volcano: Volcano) -> None:
    for verb in VOLCANO_VERBS:
        status, _, _ = volcano.call("POST", f"/volcano/{verb}", b"{}")
        assert status in (200, 400), verb
    status, body, _ = volcano.call("POST", "/volcano/predicateVerb", b"{}")
    assert status == 404 and b"kilter serves" in body
    status, body, _ = volcano.call("POST", "/volcano/jobenqueueable", b"{}")
    assert status == 404 and b"jobEnqueueable" in body
    status, _, _ = volcano.call("GET", "/volcano/predicate")
    assert status == 405


# ---------------------------------------------------------------------- quota


@pytest.mark.parametrize("version", ["v1.13", "head"])
def test_enqueue_follows_the_bound_cluster_queue_and_counts_jobs_permitted_in_the_same_session(
    volcano: Volcano, version: vp.VolcanoVersion
) -> None:
    # training: 64 nominal + up to 32 borrowed from research's 32; a job permitted is charged at once.
    first, second, third = (gpu_job(n, 12, 4, version=version) for n in ("a", "b", "c"))  # 48 GPUs each
    open_session(volcano, [first, second, third], version=version)
    assert volcano.post("jobEnqueueable", vp.job_args(first)) == (200, {"status": 1})
    assert volcano.post("jobEnqueueable", vp.job_args(second)) == (200, {"status": 1})  # 96 = 64 + 32 borrowed
    assert volcano.post("jobEnqueueable", vp.job_args(third)) == (200, {"status": -1})  # nothing left for it
    assert volcano.post("debug/volcano?job=ml/c", b"", prefix="/")[0] == 405  # GET only
    status, data, _ = volcano.call("GET", "/debug/volcano?job=ml/c")
    assert status == 200 and b"waits for quota in ClusterQueue training" in data


def test_a_job_that_can_never_fit_is_refused_and_says_why(volcano: Volcano) -> None:
    huge = gpu_job("huge", 25, 4)  # 100 GPUs > 64 nominal + 32 borrowable
    open_session(volcano, [huge])
    assert volcano.post("jobEnqueueable", vp.job_args(huge)) == (200, {"status": -1})
    status, data, _ = volcano.call("GET", "/debug/volcano?job=ml/huge")
    assert status == 200 and b"can never be admitted" in data and b"could ever hold (96)" in data


def test_queues_bound_to_no_cluster_queue_are_left_to_volcano(volcano: Volcano) -> None:
    job = gpu_job("free", 2, 4, queue="scratch")
    open_session(volcano, [job])
    assert volcano.post("jobEnqueueable", vp.job_args(job)) == (200, {"status": 0})
    assert volcano.post("queueOverused", vp.queue_args(vp.queue_info("scratch"))) == (200, {"overused": False})


def test_a_queue_borrowing_what_its_lender_now_uses_is_overused(volcano: Volcano) -> None:
    # training runs 80 GPUs (16 borrowed); research then runs its full nominal 32: training holds 16 too many.
    trainers = gpu_job("big", 20, 4, phase="Running", running_on=R1[:5] + R1[6:18] + R2[2:5])
    research = gpu_job("mine", 8, 4, queue="research", phase="Running", running_on=R2[5:13])
    open_session(volcano, [trainers, research])
    queue = vp.queue_info("ml-training", annotations={"kilter.dev/cluster-queue": "training"})
    assert volcano.post("queueOverused", vp.queue_args(queue)) == (200, {"overused": True})
    assert volcano.post("queueOverused", vp.queue_args(vp.queue_info("research"))) == (200, {"overused": False})


def test_reclaim_takes_back_only_from_the_borrower_and_echoes_victims_as_received(volcano: Volcano) -> None:
    # training borrows 16 of research's GPUs; research wants 16 back: only training's tasks may go.
    trainers = gpu_job("big", 20, 4, phase="Running", running_on=R1[:5] + R1[6:18] + R2[2:5])
    research_running = gpu_job("small", 4, 4, queue="research", phase="Running", running_on=R2[5:9])
    research_new = gpu_job("want", 4, 4, queue="research", phase="Inqueue")
    open_session(volcano, [trainers, research_running, research_new])
    evictees = [task_of(trainers, i) for i in range(6)] + [task_of(research_running, 0)]
    status, body = volcano.post("reclaimable", vp.evict_args(task_of(research_new), evictees))
    assert status == 200 and body["status"] == 1
    assert body["victims"] == [task_of(trainers, i) for i in range(6)]  # byte-for-byte the objects sent


def test_reclaim_is_refused_when_quota_gives_no_right_to_it(volcano: Volcano) -> None:
    # training uses exactly its nominal 64: research, asking beyond its own 32, may take nothing from it.
    trainers = gpu_job("fair", 16, 4, phase="Running", running_on=R1[:5] + R1[6:17])
    research_new = gpu_job("want", 12, 4, queue="research", phase="Inqueue")
    open_session(volcano, [trainers, research_new])
    status, body = volcano.post("reclaimable", vp.evict_args(task_of(research_new), [task_of(trainers, 0)]))
    assert (status, body) == (200, {"status": -1, "victims": []})


def test_reclaim_abstains_when_quota_is_not_the_obstacle(volcano: Volcano) -> None:
    trainers = gpu_job("fair", 8, 4, phase="Running", running_on=R1[:5] + R1[6:9])
    research_new = gpu_job("want", 4, 4, queue="research", phase="Inqueue")
    open_session(volcano, [trainers, research_new])
    status, body = volcano.post("reclaimable", vp.evict_args(task_of(research_new), [task_of(trainers, 0)]))
    assert (status, body) == (200, {"status": 0, "victims": []})


def test_preemption_inside_a_queue_goes_to_lower_priority_jobs(volcano: Volcano) -> None:
    # research's 32 are all used by a low-priority job, and training uses all of its 64: nothing to borrow.
    low = gpu_job("low", 8, 4, queue="research", phase="Running", running_on=R2[2:10], priority=1)
    filler = gpu_job("fill", 16, 4, phase="Running", running_on=R1[:5] + R1[6:17])
    high = gpu_job("high", 4, 4, queue="research", phase="Inqueue", priority=100)
    open_session(volcano, [low, filler, high])
    evictees = [task_of(low, i) for i in range(4)]
    status, body = volcano.post("preemptable", vp.evict_args(task_of(high), evictees))
    assert status == 200 and body["status"] == 1
    assert [t["UID"] for t in body["victims"]] == [t["UID"] for t in evictees]


def test_allocation_beyond_quota_is_rolled_back_for_jobs_volcano_enqueued_without_asking(volcano: Volcano) -> None:
    # No minResources: Volcano enqueues without asking kilter, so allocateFunc is where quota holds.
    running = gpu_job("most", 24, 4, phase="Running", running_on=R1[:5] + R1[6:18] + R2[2:9])  # 96: all of it
    late = gpu_job("late", 2, 4, min_resources=False, phase="Inqueue")
    open_session(volcano, [running, late])
    task = dict(task_of(late), NodeName="r2-t10", Status=vp.ALLOCATED)
    status, body = volcano.post("allocateFunc", vp.task_args(task))
    assert status == 200 and "no quota left" in body["errorMessage"]


# ---------------------------------------------------------------------- placement


def test_a_gang_is_planned_whole_and_held_to_its_plan(volcano: Volcano) -> None:
    gang = gpu_job("gang", 4, 4)
    open_session(volcano, [gang])
    first = task_of(gang, 0)
    verdicts = {name: predicate(volcano, first, name)[0] for name in R1 + R2}
    planned = sorted(n for n, code in verdicts.items() if code == vp.SUCCESS)
    assert len(planned) == 4
    assert len({n.split("-")[0] for n in planned}) == 1  # one NVLink domain
    assert all(code == 3 for n, code in verdicts.items() if n not in planned and n != "r1-t05")
    status, body = volcano.post("prioritize", vp.prioritize_args(first, [node(n) for n in R1 + R2]))
    assert status == 200 and body["errorMessage"] == ""
    assert sorted(n for n, s in body["nodeScore"].items() if s == 100) == planned
    assert {s for n, s in body["nodeScore"].items() if n not in planned} == {0}
    # Allocation on a planned node is booked; off the plan it is refused, which rolls it back in Volcano.
    off = next(n for n in R1 + R2 if n not in planned and n != "r1-t05")
    status, body = volcano.post("allocateFunc", vp.task_args(dict(first, NodeName=off, Status=vp.ALLOCATED)))
    assert "outside the gang's plan" in body["errorMessage"]
    status, body = volcano.post("allocateFunc", vp.task_args(dict(first, NodeName=planned[0], Status=vp.ALLOCATED)))
    assert body == {"errorMessage": ""}
    second = task_of(gang, 1)
    assert predicate(volcano, second, planned[0])[0] == 3  # that slot is now the first task's
    # jobReady: a task holding a node off the plan makes the job not ready.
    ready_job = dict(gang, Tasks={**gang["Tasks"], second["UID"]: dict(second, NodeName=off, Status=vp.ALLOCATED)})
    assert volcano.post("jobReady", vp.job_args(ready_job)) == (200, {"status": False})
    assert volcano.post("jobReady", vp.job_args(gang)) == (200, {"status": True})


def test_a_single_task_sees_both_kilters_and_volcanos_idle_gpus(volcano: Volcano) -> None:
    solo = gpu_job("solo", 1, 4)
    open_session(volcano, [solo])
    task = task_of(solo)
    assert predicate(volcano, task, "r1-t00") == (0, "")
    code, reason = predicate(volcano, task, "r1-t00", used=2)  # Volcano sees 2 in use
    assert code == 2 and "2 of 4 nvidia.com/gpu free" in reason
    code, reason = predicate(volcano, task, "r2-t00")  # kilter's snapshot has a 4-GPU pod there
    assert code == 2 and "0 of 4" in reason
    assert predicate(volcano, task, "r1-t05")[0] == 3  # cordoned
    assert predicate(volcano, task, "cpu-1")[0] == 3
    assert predicate(volcano, task, "mi-1")[0] == 3
    status, body = volcano.post("prioritize", vp.prioritize_args(task, [node(n) for n in ("r1-t00", "r2-t01")]))
    assert status == 200 and body["nodeScore"]["r2-t01"] == 0 and 0 < body["nodeScore"]["r1-t00"] <= 100
    # deallocate gives back what allocate booked.
    volcano.post("allocateFunc", vp.task_args(dict(task, NodeName="r1-t01", Status=vp.ALLOCATED)))
    assert predicate(volcano, task, "r1-t01")[0] == 2
    volcano.post("deallocateFunc", vp.task_args(dict(task, NodeName="r1-t01", Status=vp.PENDING)))
    assert predicate(volcano, task, "r1-t01")[0] == 0


def test_tasks_without_gpus_pass_untouched(volcano: Volcano) -> None:
    pod = vp.pod("ml", "cpu-only", "uid-cpu", gpus=0)
    task = vp.task_info(pod, job="ml/x")
    assert predicate(volcano, task, "cpu-1") == (0, "")
    assert volcano.post("prioritize", vp.prioritize_args(task, [node("r1-t00")])) == (
        200,
        {"nodeScore": {}, "errorMessage": ""},
    )


@pytest.mark.parametrize("mode", ["snapshot", "live"])
def test_without_a_session_a_gang_is_read_from_the_podgroup_in_the_state(tmp_path: Path, mode: str) -> None:
    group = vp.podgroup("ml", "offline", queue="ml-training", min_member=2, phase="Inqueue")
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", **group}
    pods = [
        {"apiVersion": "v1", "kind": "Pod", **vp.pod("ml", f"offline-{i}", f"uid-off-{i}", gpus=4, group="offline")}
        for i in range(2)
    ]
    for v in serve(tmp_path, [group, *pods], mode=mode):
        task = vp.task_info(pods[0])
        verdicts = {name: predicate(v, task, name)[0] for name in R1 + R2}
        assert sum(1 for code in verdicts.values() if code == 0) == 2


def test_the_legacy_v1_9_predicate_answer_is_a_status_list(volcano: Volcano) -> None:
    solo = gpu_job("solo", 1, 4)
    task = task_of(solo)
    status, body = volcano.post("predicate", vp.predicate_args(task, node("r1-t00")), prefix="/volcano/v1.9/")
    assert (status, body) == (200, {"status": []})
    status, body = volcano.post("predicate", vp.predicate_args(task, node("r1-t05")), prefix="/volcano/v1.9/")
    assert status == 200 and body["status"][0]["Code"] == 3 and body["status"][0]["Plugin"] == "kilter"


# ---------------------------------------------------------------------- HyperNodes


def hypernode(name: str, tier: int, members: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "topology.volcano.sh/v1alpha1",
        "kind": "HyperNode",
        "metadata": {"name": name},
        "spec": {"tier": tier, "members": members},
    }


@pytest.fixture(params=["snapshot", "live"])
def with_hypernodes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Volcano]:
    racks = [
        hypernode(f"hn-{r}", 1, [{"type": "Node", "selector": {"regexMatch": {"pattern": f"^{r}-"}}}])
        for r in ("r1", "r2")
    ]
    spine = hypernode("hn-spine", 2, [{"type": "HyperNode", "selector": {"exactMatch": {"name": "hn-r1"}}}])
    spine["spec"]["members"].append({"type": "HyperNode", "selector": {"exactMatch": {"name": "hn-r2"}}})
    yield from serve(tmp_path, [*racks, spine], mode=request.param)


def test_a_hard_network_topology_keeps_the_gang_under_one_hypernode_and_records_it(with_hypernodes: Volcano) -> None:
    v = with_hypernodes
    gang = gpu_job("tight", 6, 4, network_topology={"mode": "hard", "highestTierAllowed": 1})
    open_session(v, [gang])
    first = task_of(gang)
    passing = [n for n in R1 + R2 if predicate(v, first, n)[0] == 0]
    assert len(passing) == 6 and len({n[:2] for n in passing}) == 1
    status, data, _ = v.call("GET", "/debug/volcano?job=ml/tight")
    assert status == 200 and f'"hypernode": "hn-{passing[0][:2]}"'.encode() in data


def test_a_gang_larger_than_any_allowed_hypernode_does_not_fit_yet(with_hypernodes: Volcano) -> None:
    v = with_hypernodes
    gang = gpu_job("wide", 20, 4, network_topology={"mode": "hard", "highestTierAllowed": 1})  # 80 > 68 per rack
    open_session(v, [gang])
    code, reason = predicate(v, task_of(gang), "r1-t00")
    assert code == 2 and "does not fit yet" in reason


# ---------------------------------------------------------------------- bad input


BAD_BODIES = [
    b"",
    b"{",
    b"null",
    b"[]",
    b'{"task": 5}',
    b'{"task": {"Resreq": {"ScalarResources": {"nvidia.com/gpu": "x"}}}}',
]


@pytest.mark.parametrize("verb", VOLCANO_VERBS)
def test_bad_bodies_get_a_clear_error_never_a_5xx(volcano: Volcano, verb: str) -> None:
    for body in BAD_BODIES:
        status, data, _ = volcano.call("POST", f"/volcano/{verb}", body)
        assert status < 500, (verb, body, data)
        if status == 200 and verb == "predicate":
            assert b'"code":1' in data and b'"status":"' in data
        if status == 200 and verb in ("prioritize", "allocateFunc", "deallocateFunc"):
            assert b"errorMessage" in data


def test_a_predicate_with_a_null_node_names_the_problem(volcano: Volcano) -> None:
    status, body = volcano.post("predicate", {"task": task_of(gpu_job("x", 1, 4)), "node": None})
    assert status == 200 and body["code"] == 1 and "node is null" in body["status"]


def test_one_unreadable_job_in_a_session_does_not_silence_the_others(volcano: Volcano) -> None:
    good = gpu_job("good", 2, 4)
    bad = gpu_job("bad", 2, 4)
    bad["PodGroup"]["spec"]["minResources"] = {"nvidia.com/gpu": "lots"}
    open_session(volcano, [good, bad])
    assert volcano.post("jobEnqueueable", vp.job_args(good)) == (200, {"status": 1})
    status, message = volcano.post("jobEnqueueable", vp.job_args(bad))
    assert status == 400 and "lots" in message


def test_prioritize_reads_go_bodies_fast_and_any_other_json_the_same(volcano: Volcano) -> None:
    solo, gang = gpu_job("solo", 1, 4), gpu_job("gang", 4, 4)
    open_session(volcano, [solo, gang])
    nodes = [node(n) for n in (*R1[:8], *R2[:8])] + [vp.node_info("stranger", gpus=4)]
    for task in (task_of(solo), task_of(gang)):
        args = vp.prioritize_args(task, nodes)
        fast = volcano.post("prioritize", vp.to_go_json(args))  # Go's compact bytes: the header scan
        slow = volcano.post("prioritize", json.dumps(args, indent=1).encode())  # any other JSON: a full decode
        assert fast == slow
        assert fast[0] == 200 and "stranger" not in fast[1]["nodeScore"] and len(fast[1]["nodeScore"]) == 16


@pytest.mark.parametrize("version", ["v1.13", "head"])
def test_a_session_reads_the_same_from_go_bytes_and_from_any_other_json(
    volcano: Volcano, version: vp.VolcanoVersion
) -> None:
    jobs = [gpu_job(name, 12, 4, version=version) for name in ("a", "b", "c")]
    queues = [vp.queue_info("ml-training", annotations={"kilter.dev/cluster-queue": "training"}, version=version)]
    nodes = [vp.node_info(n, gpus=4, version=version) for n in R1[:3]]
    args = vp.session_open_args(jobs, nodes, queues)
    answers = []
    for body in (vp.to_go_json(args), json.dumps(args, indent=1).encode()):
        assert volcano.post("onSessionOpen", body)[0] == 200
        answers.append([volcano.post("jobEnqueueable", vp.job_args(j))[1] for j in jobs])
        volcano.post("onSessionClose", {})
    assert answers[0] == answers[1] == [{"status": 1}, {"status": 1}, {"status": -1}]


def test_predicate_reads_go_bodies_fast_and_any_other_json_the_same(volcano: Volcano) -> None:
    solo, gang = gpu_job("solo", 1, 4), gpu_job("gang", 4, 4)
    open_session(volcano, [solo, gang])
    for task in (task_of(solo), task_of(gang)):
        for name, used in (("r1-t00", 0), ("r1-t01", 2), ("r2-t00", 0), ("r1-t05", 0), ("cpu-1", 0), ("x", 0)):
            args = vp.predicate_args(
                task, node(name, used=used) if name.startswith("r") else vp.node_info(name, gpus=0)
            )
            fast = volcano.post("predicate", vp.to_go_json(args))
            slow = volcano.post("predicate", json.dumps(args, indent=1).encode())
            assert fast == slow, (task["Name"], name)


def test_go_bodies_of_the_hot_verbs_are_read_without_a_whole_decode(volcano: Volcano) -> None:
    ext = volcano.app.volcano
    assert ext is not None
    solo = gpu_job("solo", 1, 4)
    session = vp.session_open_args([solo], [node("r1-t00")], [vp.queue_info("research")])
    bodies = {
        "onSessionOpen": session,
        "predicate": vp.predicate_args(task_of(solo), node("r1-t00")),
        "prioritize": vp.prioritize_args(task_of(solo), [node("r1-t00"), node("r1-t01")]),
    }
    for verb, args in bodies.items():
        before = Counter(ext.whole_decodes)
        assert ext.call(verb, vp.to_go_json(args)).status == 200, verb
        assert ext.whole_decodes == before, verb
    kinds = {"onSessionOpen": "SessionOpenArgs", "predicate": "PredicateArgs", "prioritize": "PrioritizeArgs"}
    for verb, args in bodies.items():  # the same bodies indented are no Go output: each is decoded whole, once
        before = Counter(ext.whole_decodes)
        assert ext.call(verb, json.dumps(args, indent=1).encode()).status == 200, verb
        assert ext.whole_decodes - before == Counter({kinds[verb]: 1}), verb


def test_a_task_of_another_job_allocated_on_a_planned_node_takes_no_slot_of_that_gang(volcano: Volcano) -> None:
    gang, solo = gpu_job("gang", 4, 4), gpu_job("solo", 1, 4)
    open_session(volcano, [gang, solo])
    first = task_of(gang, 0)
    planned = sorted(n for n in R1 + R2 if predicate(volcano, first, n)[0] == vp.SUCCESS)
    assert len(planned) == 4
    # Volcano places the solo task there anyway (another plugin chose it): it books its own 4 GPUs...
    status, body = volcano.post(
        "allocateFunc", vp.task_args(dict(task_of(solo), NodeName=planned[0], Status=vp.ALLOCATED))
    )
    assert (status, body) == (200, {"errorMessage": ""})
    plan = volcano.app.extender.gangs.plan_of("ml/podgroup/gang")
    assert plan is not None
    assert [s.uid for s in plan.slots] == ["", "", "", ""]  # ...and every slot of the gang's plan is still open
    status, body = volcano.post("allocateFunc", vp.task_args(dict(first, NodeName=planned[0], Status=vp.ALLOCATED)))
    assert body == {"errorMessage": ""}
    assert sorted(s.uid for s in plan.slots) == ["", "", "", first["UID"]]

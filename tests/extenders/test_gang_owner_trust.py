"""A pod is its gang's member only under the owner kilter's state knows for the gang (issue #17), over real HTTP.

A tenant may create its own pod in a victim's namespace with the victim gang's
labels; that pod is in the state, under its own uid, so only its owner tells it
from the gang's pods: the Job (or JobSet, vcjob) that owns the gang's Workload or
PodGroup, or, for a ``kilter.dev/gang`` gang, the controller of its oldest pod.
The fleet is test_gang_trust's: two GB200 NVL72 racks and an MI355X node.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from kilter.gangs import GangBook
from tests.extenders.conftest import (
    Served,
    cluster_objects,
    names_args,
    pod_json,
    serve_snapshot,
)

RACKS = [f"r{r}-t{t:02d}" for r in (1, 2) for t in range(18)]
GPU_CONTAINER = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}
PLAIN_POD_NODES = 33  # 36 trays but the cordoned one and the two busy ones: where a pod in no gang may go


def owner(kind: str, name: str, uid: str, *, api_version: str = "batch/v1", controller: bool = True) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": controller}


def member(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owners: list[dict[str, Any]] | None = None,
    created: str = "2026-12-01T08:00:00Z",
) -> dict[str, Any]:
    pod = pod_json(name, 4, labels=labels, annotations=annotations)
    pod["metadata"]["creationTimestamp"] = created
    if owners:
        pod["metadata"]["ownerReferences"] = owners
    return pod


def gang_labels(gang: str, size: int) -> dict[str, str]:
    return {"kilter.dev/gang": gang, "kilter.dev/gang-size": str(size)}


def serve(tmp_path: Path, objects: list[dict[str, Any]]) -> contextlib.AbstractContextManager[Served]:
    """The scenario's cluster and ``objects``, served from a snapshot."""
    return serve_snapshot(tmp_path, [*cluster_objects(), *objects])


def book(served: Served) -> GangBook:
    return served.app.extender.gangs


def workload(name: str, count: int, owners: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-wl-{name}", "ownerReferences": owners},
        "spec": {
            "queueName": "q",
            "podSets": [{"name": "main", "count": count, "template": {"spec": {"containers": [GPU_CONTAINER]}}}],
        },
    }


def assert_strangers_get_no_slot(served: Served, gang: str, victims: list[Any], strangers: list[Any]) -> None:
    _, first = served.post("filter", names_args(victims[0], RACKS))
    planned = first["NodeNames"]
    assert len(planned) == len(victims) and (p := book(served).plan_of(gang)) is not None and p.verified
    refused = book(served).refused
    for i, stranger in enumerate(strangers, 1):
        _, result = served.post("filter", names_args(stranger, planned))
        assert result["NodeNames"] == [], result  # the slots' GPUs are held for the gang's pods ...
        _, anywhere = served.post("filter", names_args(stranger, RACKS))
        assert len(anywhere["NodeNames"]) == PLAIN_POD_NODES - len(planned)  # ... it goes where any pod may
        assert book(served).refused == refused + 2 * i
    plan = book(served).plan_of(gang)
    assert plan is not None
    assert [s.uid for s in plan.slots] == [""] * len(victims)
    for victim in victims[1:]:
        _, result = served.post("filter", names_args(victim, RACKS))
        assert result["NodeNames"] == planned
    assert book(served).refused == refused + 2 * len(strangers)


def test_a_kilter_gang_under_two_controllers_gets_a_slot_for_every_member(tmp_path: Path) -> None:
    # An MPI launcher Job and its worker StatefulSet under one gang label: every pod is a member, none waits.
    labels = gang_labels("mpi", 3)
    launcher = member("mpi-0", labels=labels, owners=[owner("Job", "mpi-l", "uid-l")], created="2026-12-01T07:00:00Z")
    statefulset = owner("StatefulSet", "mpi-w", "uid-w", api_version="apps/v1")
    workers = [member(f"mpi-w{i}", labels=labels, owners=[statefulset]) for i in range(2)]
    with serve(tmp_path, [launcher, *workers]) as served:
        _, first = served.post("filter", names_args(launcher, RACKS))
        planned = first["NodeNames"]
        assert len(planned) == 3 and (p := book(served).plan_of("ml/gang/mpi")) is not None and p.verified
        for pod in workers:
            _, result = served.post("filter", names_args(pod, RACKS))
            assert result["NodeNames"] == planned
        assert book(served).refused == 0


def test_a_gang_of_bare_pods_is_not_checked_for_owners(tmp_path: Path) -> None:
    pods = [member(f"bare-{i}", labels=gang_labels("bare", 2)) for i in range(2)]
    with serve(tmp_path, pods) as served:
        _, first = served.post("filter", names_args(pods[0], RACKS))
        _, second = served.post("filter", names_args(pods[1], RACKS))
        assert len(first["NodeNames"]) == 2 and second["NodeNames"] == first["NodeNames"]
        assert book(served).refused == 0


def test_a_workload_gangs_members_are_its_jobs_pods_and_a_stranger_under_another_job_is_not(tmp_path: Path) -> None:
    wl = workload("wl", 3, [owner("Job", "train", "uid-job-train")])
    notes = {"kueue.x-k8s.io/workload": "wl"}
    victims = [
        member(f"train-{i}", annotations=notes, owners=[owner("Job", "train", "uid-job-train")]) for i in range(3)
    ]
    evil = member("evil-0", annotations=notes, owners=[owner("Job", "train", "uid-job-evil")])  # its name, not its uid
    with serve(tmp_path, [wl, *victims, evil]) as served:
        assert_strangers_get_no_slot(served, "ml/workload/wl", victims, [evil])


def test_a_jobsets_pods_are_its_workloads_members_through_the_jobs_it_names(tmp_path: Path) -> None:
    js = owner("JobSet", "js", "uid-js", api_version="jobset.x-k8s.io/v1alpha2")
    wl = workload("wl-js", 2, [js])
    notes = {"kueue.x-k8s.io/workload": "wl-js"}
    victims = [
        member(f"js-workers-{i}-0", annotations=notes, owners=[owner("Job", f"js-workers-{i}", f"uid-j{i}")])
        for i in range(2)
    ]
    evil = member("evil-0", annotations=notes, owners=[owner("Job", "jsx-workers-0", "uid-jx")])
    with serve(tmp_path, [wl, *victims, evil]) as served:
        assert_strangers_get_no_slot(served, "ml/workload/wl-js", victims, [evil])


def test_a_volcano_podgroup_gangs_members_are_its_vcjobs_pods(tmp_path: Path) -> None:
    vcjob = owner("Job", "mpi", "uid-vcjob", api_version="batch.volcano.sh/v1alpha1")
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "mpi-pg", "namespace": "ml", "ownerReferences": [vcjob]},
        "spec": {"minMember": 2},
    }
    notes = {"scheduling.k8s.io/group-name": "mpi-pg"}
    victims = [member(f"mpi-{i}", annotations=notes, owners=[vcjob]) for i in range(2)]
    evil = member("evil-0", annotations=notes, owners=[owner("ReplicaSet", "evil", "uid-rs", api_version="apps/v1")])
    with serve(tmp_path, [group, *victims, evil]) as served:
        assert_strangers_get_no_slot(served, "ml/podgroup/mpi-pg", victims, [evil])


def test_a_kueue_pod_groups_members_are_the_pods_its_workload_is_owned_by(tmp_path: Path) -> None:
    labels = {"kueue.x-k8s.io/pod-group-name": "grp"}
    notes = {"kueue.x-k8s.io/pod-group-total-count": "2"}
    victims = [member(f"grp-{i}", labels=labels, annotations=notes) for i in range(2)]
    wl = workload(
        "grp", 2, [owner("Pod", p["metadata"]["name"], p["metadata"]["uid"], api_version="v1") for p in victims]
    )
    wl["metadata"]["annotations"] = {"kueue.x-k8s.io/is-group-workload": "true"}
    evil = member("evil-0", labels=labels, annotations=notes)
    with serve(tmp_path, [wl, *victims, evil]) as served:
        assert_strangers_get_no_slot(served, "ml/pod-group/grp", victims, [evil])

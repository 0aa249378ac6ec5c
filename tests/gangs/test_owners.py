"""Which owner a gang's member must be under (``gangs.owners``), rule by rule, on a store built from objects."""

from __future__ import annotations

from typing import Any

import pytest

from kilter.gangs import owners
from kilter.model.core_v1 import Pod
from kilter.state.store import ClusterStore
from tests.extenders.conftest import cluster_objects, pod_json

GANG = {"kilter.dev/gang": "g", "kilter.dev/gang-size": "3"}
IN_WL = {"kueue.x-k8s.io/workload": "wl"}
RAY = "ray.io/v1"


def ref(kind: str, name: str, uid: str, *, api: str = "batch/v1", controller: bool | None = True) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": api, "kind": kind, "name": name, "uid": uid}
    if controller is not None:
        out["controller"] = controller
    return out


def pod(
    name: str,
    *refs: dict[str, Any],
    created: str | None = "2026-12-01T08:00:00Z",
    labels: dict[str, str] = GANG,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    out = pod_json(name, 4, labels=labels, annotations=annotations)
    out["metadata"]["creationTimestamp"] = created
    if refs:
        out["metadata"]["ownerReferences"] = list(refs)
    return out


def verdicts(key: str, *objects: dict[str, Any]) -> dict[str, str]:
    """Why each pod of ``objects`` is no member of gang ``key`` ("" for a member)."""
    store = ClusterStore()
    store.replace([*cluster_objects(), *objects])
    held = [store.pod_named("ml", o["metadata"]["name"]) for o in objects if o["kind"] == "Pod"]
    return {p.metadata.name: owners.stranger(store, key, p) for p in held if isinstance(p, Pod)}


def test_a_kilter_gang_is_not_checked_by_owner_so_a_launcher_and_its_workers_are_all_members() -> None:
    # An MPI launcher Job and its workers under one gang label: two controllers, one gang.
    launcher, workers = ref("Job", "mpi-launcher", "uid-l"), ref("StatefulSet", "mpi-worker", "uid-w", api="apps/v1")
    found = verdicts(
        "ml/gang/g",
        pod("mpi-launcher-0", launcher, created="2026-12-01T07:00:00Z"),
        pod("mpi-worker-0", workers),
        pod("bare"),
    )
    assert found == {"mpi-launcher-0": "", "mpi-worker-0": "", "bare": ""}


def test_a_gang_of_bare_pods_and_an_owner_only_in_name_are_not_checked() -> None:
    found = verdicts("ml/gang/g", pod("a"), pod("b"), pod("c", ref("Job", "j", "uid-j", controller=False)))
    assert found == {"a": "", "b": "", "c": ""}


def workload(name: str, refs: Any, **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "ownerReferences": refs}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": meta, "spec": {"podSets": []}}


def test_a_job_owner_takes_only_its_own_pods_by_uid() -> None:
    found = verdicts(
        "ml/workload/wl",
        workload("wl", [ref("Job", "train", "uid-train")]),
        pod("mine", ref("Job", "train", "uid-train"), labels={}, annotations=IN_WL),
        pod("same-name", ref("Job", "train", "uid-other"), labels={}, annotations=IN_WL),
        pod("made-by-job", ref("Job", "train-x", "uid-x"), labels={}, annotations=IN_WL),  # a Job owner makes no Jobs
    )
    assert found["mine"] == ""
    assert "not by an owner of Workload ml/wl (Job train)" in found["same-name"]
    assert found["made-by-job"] != ""


def test_an_owner_takes_the_pods_of_children_of_another_kind_named_after_it() -> None:
    jobset = ref("JobSet", "js", "uid-js", api="jobset.x-k8s.io/v1alpha2")
    found = verdicts(
        "ml/workload/wl",
        workload("wl", [jobset]),
        pod("w0", ref("Job", "js-workers-0", "uid-1"), labels={}, annotations=IN_WL),
        pod("w1", ref("Job", "js", "uid-2"), labels={}, annotations=IN_WL),
        pod("prefix", ref("Job", "jsx-workers-0", "uid-3"), labels={}, annotations=IN_WL),
        pod("other-kind", ref("RayCluster", "js-raycluster-x1", "uid-4", api=RAY), labels={}, annotations=IN_WL),
        pod("other-name", ref("RayCluster", "train-raycluster", "uid-5", api=RAY), labels={}, annotations=IN_WL),
        pod("same-kind", ref("JobSet", "js-2", "uid-6", api="jobset.x-k8s.io/v1alpha2"), labels={}, annotations=IN_WL),
    )
    assert found["w0"] == found["w1"] == found["other-kind"] == ""  # a JobSet's Jobs, a RayJob-style child
    assert found["prefix"] != "" and found["other-name"] != ""
    assert found["same-kind"] != ""  # a JobSet controls its pods through Jobs, never another JobSet


def test_a_pod_an_object_is_owned_by_is_its_member() -> None:
    alone = pod("alone", annotations={"scheduling.k8s.io/group-name": "pg"}, labels={})
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "ml", "ownerReferences": [ref("Pod", "alone", "uid-alone", api="v1")]},
        "spec": {"minMember": 1},
    }
    other = pod("other", annotations={"scheduling.k8s.io/group-name": "pg"}, labels={})
    why = "is controlled by no owner, not by an owner of PodGroup ml/pg (Pod alone)"
    assert verdicts("ml/podgroup/pg", group, alone, other) == {"alone": "", "other": why}


@pytest.mark.parametrize(
    "workload_refs",
    ["not a list", [{"kind": "Job", "name": "no-uid"}, "not an object"], []],
)
def test_owners_the_state_cannot_read_check_nothing(workload_refs: Any) -> None:
    found = verdicts(
        "ml/workload/wl",
        workload("wl", workload_refs),
        pod("p", ref("Job", "j", "uid-j"), labels={}, annotations=IN_WL),
    )
    assert found == {"p": ""}


def test_a_pod_group_is_checked_against_kueues_group_workload_only() -> None:
    labels = {"kueue.x-k8s.io/pod-group-name": "grp"}
    owned_by_a = [ref("Pod", "a", "uid-a", api="v1", controller=None)]
    plain = verdicts("ml/pod-group/grp", workload("grp", owned_by_a), pod("a", labels=labels), pod("b", labels=labels))
    assert plain == {"a": "", "b": ""}  # a Workload of that name that is no group's: not the group's owner
    group = workload("grp", owned_by_a, **{"kueue.x-k8s.io/is-group-workload": "true"})
    found = verdicts("ml/pod-group/grp", group, pod("a", labels=labels), pod("b", labels=labels))
    assert found["a"] == "" and "not by an owner of Workload ml/grp (Pod a)" in found["b"]


def test_a_key_that_does_not_parse_checks_nothing() -> None:
    assert verdicts("ml/nonsense", pod("p", ref("Job", "j", "uid-j"))) == {"p": ""}

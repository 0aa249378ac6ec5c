"""Reviews kube-apiserver could not have sent, or objects no one but kilter may write, over real HTTPS."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kilter.gangs import records
from kilter.model.jobs import read_job
from kilter.webhooks.validate import pod_set_shape
from tests.extenders.conftest import (
    Served,
    cluster_objects,
    names_args,
    pod_json,
    serve_snapshot,
)
from tests.webhooks.conftest import KILTER_USER, Hooks, admission_review, start, workload_wl


@pytest.fixture
def hooks(tmp_path: Path) -> Iterator[Hooks]:
    yield from start(tmp_path, cluster_objects())


def deep_review(levels: int) -> bytes:
    """A well-formed AdmissionReview whose object nests ``levels`` deep: past the decoder's recursion limit."""
    head = (
        '{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1",'
        '"kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","object":'
    )
    return (head + '{"a":' * levels + "1" + "}" * levels + "}}").encode()


@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_a_review_nested_too_deep_gets_400_with_one_line(hooks: Hooks, path: str) -> None:
    status, data = hooks.post(path, deep_review(100_000))
    assert status == 400
    assert data == b"not an AdmissionReview: JSON nested too deep\n"
    answer = hooks.review(path, admission_review({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}))
    assert answer["response"]["allowed"] is True  # still serving


# ---------------------------------------------------------------------- one gang-size rule

BAD_GANG_SIZES = ["0", "-1", "abc", str(2**64), "1e3", " 4", "4 ", "+4", "100001", "²", "４", ""]


@pytest.fixture
def extender(tmp_path: Path) -> Iterator[Served]:
    with serve_snapshot(tmp_path / "extender") as served:
        yield served


def gang_member(size: str, *, where: str = "labels") -> dict[str, Any]:
    pod = pod_json("g-0", 4, labels={"kilter.dev/gang": "g"})
    if where == "labels":
        pod["metadata"]["labels"]["kilter.dev/gang-size"] = size
    else:
        pod["metadata"]["annotations"] = {"kilter.dev/gang-size": size}
    return pod


@pytest.mark.parametrize("where", ["labels", "annotations"])
@pytest.mark.parametrize("size", BAD_GANG_SIZES)
def test_a_gang_size_the_webhook_denies_the_extender_refuses_with_the_same_words(
    hooks: Hooks, extender: Served, size: str, where: str
) -> None:
    pod = gang_member(size, where=where)
    answer = hooks.review("/validate", admission_review(pod))["response"]
    assert answer["allowed"] is False and answer["status"]["code"] == 422
    status, result = extender.post("filter", names_args(pod, ["r1-t00"]))
    assert status == 200 and result["NodeNames"] is None
    words = f"label kilter.dev/gang-size must be a whole number from 1 to 100,000, got {size!r}"
    assert answer["status"]["message"] == words
    assert result["Error"] == words


@pytest.mark.parametrize("size", ["1", "4", "0004", "100000"])
def test_a_gang_size_the_webhook_allows_the_extender_plans(hooks: Hooks, extender: Served, size: str) -> None:
    pod = gang_member(size)
    assert hooks.review("/validate", admission_review(pod))["response"]["allowed"] is True
    status, result = extender.post("filter", names_args(pod, ["r1-t00"]))
    assert status == 200 and result["Error"] == ""


# ---------------------------------------------------------------------- kilter.dev/plan is kilter's

PLAN = "kilter.dev/plan"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
KUEUE_CONTROLLER = "system:serviceaccount:kueue-system:kueue-controller-manager"


def plan_value(gang: str, nodes: tuple[str, ...] = ("r1-t00", "r1-t01")) -> str:
    return records.encode(records.PlanRecord(gang, 1_780_000_000.0, tuple((n, 4) for n in nodes)))


ISSUED = plan_value("ml/workload/wl")  # what kilter's AdmissionCheck put in the Workload's podSetUpdates


def plan_workload() -> dict[str, Any]:
    """Workload ml/wl as Kueue admitted it, with kilter's check Ready and its plan record for pod set main."""
    update = {"name": "main", "annotations": {PLAN: ISSUED}}
    return workload_wl({"state": "Ready", "message": "planned", "podSetUpdates": [update]})


@pytest.fixture
def planned(tmp_path: Path) -> Iterator[Hooks]:
    yield from start(tmp_path, [*cluster_objects(), plan_workload()])


def with_plan(obj: dict[str, Any], value: str | None) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    notes = out["metadata"].setdefault("annotations", {})
    notes.pop(PLAN, None)
    if value is not None:
        notes[PLAN] = value
    return out


def podgroup() -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "ml"},
        "spec": {"minMember": 2, "queue": "default"},
    }


def decide(hooks: Hooks, obj: dict[str, Any] | None, *, user: str, old: dict[str, Any] | None = None) -> Any:
    review = admission_review(obj, operation="UPDATE" if old is not None else "CREATE", old=old, user=user)
    return hooks.review("/validate", review)["response"]


OBJECTS = {"Pod": lambda: pod_json("p"), "PodGroup": podgroup, "Workload": plan_workload}


@pytest.mark.parametrize("kind", list(OBJECTS))
def test_only_kilter_may_create_an_object_carrying_a_plan(planned: Hooks, kind: str) -> None:
    obj = with_plan(OBJECTS[kind](), plan_value("ml/workload/other"))
    denied = decide(planned, obj, user="alice@example.com")
    assert denied["allowed"] is False and denied["status"]["code"] == 403
    assert denied["status"]["message"] == (
        "annotation kilter.dev/plan is written by kilter only; remove it from your change "
        "(user alice@example.com is not kilter)"
    )
    assert decide(planned, obj, user=KILTER_USER)["allowed"] is True
    assert decide(planned, with_plan(obj, None), user="alice@example.com")["allowed"] is True


@pytest.mark.parametrize("kind", list(OBJECTS))
def test_only_kilter_may_change_or_remove_a_plan_others_may_edit_around_it(planned: Hooks, kind: str) -> None:
    old = with_plan(OBJECTS[kind](), ISSUED)
    changed = with_plan(old, plan_value("ml/workload/wl", ("r2-t00", "r2-t01")))
    assert decide(planned, changed, old=old, user="alice@example.com")["allowed"] is False
    assert decide(planned, with_plan(old, None), old=old, user="alice@example.com")["allowed"] is False
    assert decide(planned, changed, old=old, user=KILTER_USER)["allowed"] is True
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {"team": "b"}
    assert decide(planned, relabelled, old=old, user="alice@example.com")["allowed"] is True


def test_a_pod_given_the_record_kilter_issued_for_its_workload_is_allowed_whoever_copies_it(
    planned: Hooks,
) -> None:
    pod = with_plan(pod_json("wl-0"), ISSUED)
    assert decide(planned, pod, user=JOB_CONTROLLER)["allowed"] is True
    for forged in (
        plan_value("ml/workload/wl", ("r2-t00", "r2-t01")),  # kilter's gang, other nodes
        ISSUED.replace("}", " }", 1),  # the same record, other bytes
        plan_value("ml/workload/ghost"),  # a Workload the state does not hold
        "not a record",
    ):
        assert decide(planned, with_plan(pod, forged), user=JOB_CONTROLLER)["allowed"] is False, forged
    ungated = decide(planned, pod, old=pod_json("wl-0"), user=KUEUE_CONTROLLER)  # Kueue's plain pod groups
    assert ungated["allowed"] is True
    assert (
        decide(planned, with_plan(pod, "not a record"), old=pod_json("wl-0"), user=KUEUE_CONTROLLER)["allowed"] is False
    )
    elsewhere = with_plan(pod_json("wl-0"), ISSUED)
    elsewhere["metadata"]["namespace"] = "other"
    review = admission_review(elsewhere, user=JOB_CONTROLLER)
    assert planned.review("/validate", review)["response"]["allowed"] is False  # another namespace's record


# ---------------------------------------------------------------------- memos stay small


def job_with_selector(size: int, salt: str) -> dict[str, Any]:
    """A batch Job whose pod template carries a node selector of ``size`` entries (a big, distinct pod spec)."""
    template = {"spec": {"nodeSelector": {f"k{i}-{salt}": "v" * 32 for i in range(size)}, "containers": []}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"j-{salt}", "namespace": "ml"},
        "spec": {"parallelism": 2, "completions": 2, "template": template},
    }


def test_a_pod_set_shape_is_a_fixed_size_digest_however_big_the_spec() -> None:
    big = read_job(job_with_selector(20_000, "a")).gangs[0]  # ~1 MB of spec
    same = read_job(job_with_selector(20_000, "a")).gangs[0]
    other = read_job(job_with_selector(20_000, "b")).gangs[0]
    assert len(pod_set_shape(big)) == 32
    assert pod_set_shape(big) == pod_set_shape(same) and pod_set_shape(big) != pod_set_shape(other)


# ---------------------------------------------------------------------- JSON a tenant writes inside a value

DEEP_VALUE = "[" * 100_000 + "]" * 100_000  # JSON, nested past the parser's recursion limit


def test_a_slice_constraint_nested_too_deep_is_denied_for_what_it_is(hooks: Hooks) -> None:
    template = {
        "metadata": {"annotations": {"kueue.x-k8s.io/podset-slice-required-topology-constraints": DEEP_VALUE}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "deep", "namespace": "team-a"},
        "spec": {"parallelism": 2, "completions": 2, "template": template},
    }
    response = hooks.review("/validate", admission_review(job))["response"]
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "podset-slice-required-topology-constraints is not JSON: nested too deep" in message
    assert "could not review" not in message  # an ordinary denial, not the rule's last resort


def test_a_decayed_usage_nested_too_deep_is_denied_for_what_it_is(hooks: Hooks) -> None:
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "deep", "annotations": {"kilter.dev/decayed-usage": DEEP_VALUE}},
        "spec": {"resourceGroups": []},
    }
    response = hooks.review("/validate", admission_review(queue, user=KILTER_USER))["response"]
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "kilter.dev/decayed-usage is not JSON: nested too deep" in message
    assert "could not review" not in message

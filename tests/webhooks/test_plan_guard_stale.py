"""A Pod may carry a signed plan record of its own namespace's Workload that kilter's state does not show yet.

With ``--snapshot`` the state is minutes old: Kueue's job controllers create
pods with the record kilter's AdmissionCheck put in the Workload's
podSetUpdates before any snapshot shows it. Such a record steers nothing
unless a plan key verifies it for the Workload's UID, so the webhook lets it
pass; what no key could make count (an unsigned record, another namespace's
or another kind of gang's, a record replaced on a Pod) is still refused, over
real HTTPS.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kilter.gangs import PlanKeys, records
from tests.extenders.conftest import cluster_objects, pod_json
from tests.webhooks.conftest import KILTER_USER, Hooks, admission_review, start, workload_wl

PLAN = "kilter.dev/plan"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
KUEUE_CONTROLLER = "system:serviceaccount:kueue-system:kueue-controller-manager"
KEYS = PlanKeys.ephemeral(announce=False)  # kilter's: the tenant in these tests has none


def record(gang: str, *, uid: str = "uid-wl", keys: PlanKeys | None = KEYS) -> str:
    """A plan record for ``gang`` as kilter's AdmissionCheck writes it, signed for the Workload ``uid``."""
    plan = records.PlanRecord(gang, 1_780_000_000.0, (("r1-t00", 4), ("r1-t01", 4)))
    return records.encode(plan, keys=keys, uid=uid)


def admitted_workload() -> dict[str, Any]:
    """Workload ml/wl as the last snapshot showed it: kilter's check still Pending, no podSetUpdates yet."""
    return workload_wl({"state": "Pending", "message": ""})


@pytest.fixture(params=["snapshot", "live"])
def stale(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Hooks]:
    """The webhook over a state that shows Workload ml/wl without its record, and no Workload ml/new at all."""
    yield from start(tmp_path, [*cluster_objects(), admitted_workload()], mode=request.param)


def with_plan(obj: dict[str, Any], value: str | None, *, namespace: str = "ml") -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["namespace"] = namespace
    notes = out["metadata"].setdefault("annotations", {})
    notes.pop(PLAN, None)
    if value is not None:
        notes[PLAN] = value
    return out


def allowed(hooks: Hooks, obj: dict[str, Any], *, user: str, old: dict[str, Any] | None = None) -> bool:
    review = admission_review(obj, operation="UPDATE" if old is not None else "CREATE", old=old, user=user)
    response = hooks.review("/validate", review)["response"]
    if not response["allowed"]:
        assert response["status"]["code"] == 403
    return bool(response["allowed"])


@pytest.mark.parametrize("workload", ["wl", "new"])
def test_a_job_controller_creates_a_pod_with_a_signed_record_the_state_does_not_show_yet(
    stale: Hooks, workload: str
) -> None:
    pod = with_plan(pod_json(f"{workload}-0"), record(f"ml/workload/{workload}", uid=f"uid-{workload}"))
    assert allowed(stale, pod, user=JOB_CONTROLLER)


def test_kueue_ungates_a_pod_with_a_signed_record_the_state_does_not_show_yet(stale: Hooks) -> None:
    gated = pod_json("new-0")
    assert allowed(stale, with_plan(gated, record("ml/workload/new")), old=gated, user=KUEUE_CONTROLLER)


def test_an_unsigned_record_is_refused_whatever_the_state_shows(stale: Hooks) -> None:
    for workload in ("wl", "new"):
        pod = with_plan(pod_json(f"{workload}-0"), record(f"ml/workload/{workload}", keys=None))
        assert not allowed(stale, pod, user=JOB_CONTROLLER), workload
        assert not allowed(stale, pod, old=pod_json(f"{workload}-0"), user=KUEUE_CONTROLLER), workload


def test_a_signed_record_of_another_namespace_is_refused(stale: Hooks) -> None:
    theirs = with_plan(pod_json("wl-0"), record("ml/workload/wl"), namespace="team-b")  # ml's record in team-b
    assert not allowed(stale, theirs, user=JOB_CONTROLLER)
    naming = with_plan(pod_json("wl-0"), record("team-b/workload/wl"))  # team-b's record in ml
    assert not allowed(stale, naming, user=JOB_CONTROLLER)


@pytest.mark.parametrize("gang", ["ml/gang/train", "ml/podgroup/pg", "ml/workload", "not a gang"])
def test_a_signed_record_of_another_kind_of_gang_is_refused(stale: Hooks, gang: str) -> None:
    assert not allowed(stale, with_plan(pod_json("p"), record(gang)), user=JOB_CONTROLLER)


def test_a_signed_record_may_not_replace_another_on_a_pod(stale: Hooks) -> None:
    old = with_plan(pod_json("new-0"), record("ml/workload/new"))
    changed = with_plan(old, record("ml/workload/new", uid="uid-other"))
    assert not allowed(stale, changed, old=old, user=KUEUE_CONTROLLER)
    assert not allowed(stale, with_plan(old, None), old=old, user=KUEUE_CONTROLLER)  # nor be removed
    assert allowed(stale, changed, old=old, user=KILTER_USER)


def test_a_signed_record_on_a_workload_or_podgroup_is_still_kilters_to_write(stale: Hooks) -> None:
    podgroup = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "ml"},
        "spec": {"minMember": 2, "queue": "default"},
    }
    for obj, gang in ((admitted_workload(), "ml/workload/wl"), (podgroup, "ml/podgroup/pg")):
        signed = with_plan(obj, record(gang))
        assert not allowed(stale, signed, user=KUEUE_CONTROLLER), gang
        assert allowed(stale, signed, user=KILTER_USER), gang

"""The kilter.dev/topology AdmissionCheck (Ready, Retry, Rejected) on Workloads shaped as Kueue writes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.main import main
from kilter.gangs.records import PlanRecord, decode, encode
from kilter.state.cluster import from_objects
from kilter.webhooks.admissioncheck import RETRY_AFTER_S, active_status, decide
from tests.extenders.conftest import cluster_objects

CHECK = "kilter-topology"


def admission_check(name: str, controller: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {"name": name},
        "spec": {"controllerName": controller},
    }


def workload(
    name: str, pods: int, *, reserved: bool = True, checks: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A Workload as Kueue writes it for a 4-GPU-per-pod batch Job, quota reserved, checks pending."""
    conditions = [
        {
            "type": "QuotaReserved",
            "status": "True" if reserved else "False",
            "reason": "QuotaReserved" if reserved else "Pending",
            "message": "Quota reserved in ClusterQueue gpu" if reserved else "waiting",
            "lastTransitionTime": "2026-12-01T10:00:00Z",
            "observedGeneration": 1,
        }
    ]
    status: dict[str, Any] = {
        "conditions": conditions,
        "admissionChecks": checks
        if checks is not None
        else [{"name": CHECK, "state": "Pending", "lastTransitionTime": "2026-12-01T10:00:00Z", "message": ""}],
    }
    if reserved:
        status["admission"] = {
            "clusterQueue": "gpu",
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {"nvidia.com/gpu": "gb200"},
                    "resourceUsage": {"nvidia.com/gpu": str(4 * pods)},
                    "count": pods,
                }
            ],
        }
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "generation": 1,
            "creationTimestamp": "2026-12-01T09:59:00Z",
        },
        "spec": {
            "queueName": "team",
            "active": True,
            "podSets": [
                {
                    "name": "main",
                    "count": pods,
                    "template": {
                        "metadata": {},
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "4"}}}
                            ],
                        },
                    },
                }
            ],
        },
        "status": status,
    }


def objects() -> list[dict[str, Any]]:
    others = [{"name": "other-check", "state": "Pending", "lastTransitionTime": "2026-12-01T10:00:00Z", "message": ""}]
    ready = [{"name": CHECK, "state": "Ready", "lastTransitionTime": "2026-12-01T10:00:00Z", "message": "placed"}]
    return [
        *cluster_objects(),
        admission_check(CHECK, "kilter.dev/topology"),
        admission_check("other-check", "example.com/other"),
        workload("fits", 4),
        workload("spans", 30),  # 33 free healthy trays in two racks
        workload("later", 34),  # 35 healthy trays when idle, 33 free now
        workload("never", 40),
        workload("no-quota", 4, reserved=False),
        workload("already-ready", 4, checks=ready),
        workload("someone-elses", 4, checks=others),
    ]


PLANNED_AT = 1_780_000_000.0  # 2026-05-28T20:26:40Z


def decisions() -> dict[str, Any]:
    state = from_objects(objects())
    return {d.workload: d for d in decide(state, state.fleet(), state.idle_fleet(), now_s=PLANNED_AT)}


def test_each_waiting_workload_gets_ready_retry_or_rejected() -> None:
    got = decisions()
    assert set(got) == {"fits", "spans", "later", "never"}
    assert got["fits"].state == "Ready" and got["fits"].message.startswith("placed: 4 pods")
    # The partly used rack first: the idle one stays whole for a larger gang.
    assert got["fits"].pod_set_updates == [{"name": "main", "nodeSelector": {"nvidia.com/gpu.clique": "r2"}}]
    assert got["spans"].state == "Ready"
    # Two racks: no one domain to pin, so the pods carry the pod set's plan record (the format of every record).
    planned = got["spans"].plan.pod_sets[0]
    assert (planned.name, planned.count, planned.gpus_per_pod, len(planned.nodes)) == ("main", 30, 4, 30)
    record = PlanRecord("ml/workload/spans", PLANNED_AT, tuple((node, 4) for node in planned.nodes))
    assert got["spans"].pod_set_updates == [{"name": "main", "annotations": {"kilter.dev/plan": encode(record)}}]
    assert decode(encode(record), where="test") == record
    assert got["later"].state == "Retry" and got["later"].requeue_after_seconds == RETRY_AFTER_S
    assert got["never"].state == "Rejected" and "can never fit" in got["never"].message


def test_status_is_applied_with_only_kilters_own_entry() -> None:
    body = decisions()["fits"].apply_body("2026-12-02T00:00:00Z")
    assert body == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "fits", "namespace": "ml"},
        "status": {
            "admissionChecks": [
                {
                    "name": CHECK,
                    "state": "Ready",
                    "lastTransitionTime": "2026-12-02T00:00:00Z",
                    "message": decisions()["fits"].message,
                    "podSetUpdates": [{"name": "main", "nodeSelector": {"nvidia.com/gpu.clique": "r2"}}],
                }
            ]
        },
    }
    retry = decisions()["later"].entry("2026-12-02T00:00:00Z")
    assert retry["requeueAfterSeconds"] == RETRY_AFTER_S and "podSetUpdates" not in retry
    active = active_status(CHECK, "2026-12-02T00:00:00Z")["status"]["conditions"][0]
    assert (active["type"], active["status"], active["reason"]) == ("Active", "True", "Active")


def test_the_command_prints_what_the_controller_would_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snapshot = tmp_path / "cluster.json"
    snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects()}))
    assert main(["admission-check", "--snapshot", str(snapshot), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["admissionChecks"] == [CHECK]
    states = {w["name"]: w["admissionCheck"]["state"] for w in out["workloads"]}
    assert states == {"fits": "Ready", "later": "Retry", "never": "Rejected", "spans": "Ready"}
    assert main(["admission-check", "--snapshot", str(snapshot)]) == 0
    table = capsys.readouterr().out
    assert "ml/never" in table and "Rejected" in table

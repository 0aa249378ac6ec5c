"""``kilter queues`` as users run it: the promised JSON, base units, Infinity, clear errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kilter.cli.main import main
from tests.conftest import REPO

QUEUES = REPO / "examples" / "queues" / "ai-platform.yaml"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {i["name"]: i for i in items}


def test_queues_json_has_every_queue_and_cohort_with_the_promised_fields(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "queues", "--snapshot", str(QUEUES), "-o", "json", "--now", "2026-12-01T11:00:00Z")
    assert code == 0
    data = json.loads(out)
    cqs, cohorts = by_name(data["clusterQueues"]), by_name(data["cohorts"])
    assert sorted(cqs) == ["llm-research", "prod-inference", "prod-training", "vision-research"]
    assert sorted(cohorts) == ["ai-platform", "production", "research"]
    llm = cqs["llm-research"]
    assert {k: llm[k] for k in ("parent", "weight", "dominantResource", "borrowing")} == {
        "parent": "research",
        "weight": 2.0,
        "dominantResource": "nvidia.com/gpu",
        "borrowing": True,
    }
    # Borrows 896 - 576 = 320 GPUs of the 1,416 its cohort could lend: 320 * 1000 / 1416 / weight 2.
    assert llm["weightedShare"] == pytest.approx(320 * 1000 / 1416 / 2)
    gpu = next(r for r in llm["resources"] if r["resource"] == "nvidia.com/gpu")
    assert gpu == {
        "flavor": "gb200",
        "resource": "nvidia.com/gpu",
        "nominal": 576,
        "borrowingLimit": None,
        "lendingLimit": None,
        "usage": 896,
        "available": 136,
        "potentialAvailable": 1416,
        "borrowed": 320,  # 896 used - 576 nominal
        "lent": 0,  # it uses more than its own quota: nothing of it is unused to lend
    }
    assert (llm["pendingWorkloads"], llm["reservingWorkloads"], llm["admittedWorkloads"]) == (1, 3, 3)
    cpu = next(r for r in llm["resources"] if r["resource"] == "cpu")
    assert cpu["nominal"] == 10368 and isinstance(cpu["usage"], int)
    training = next(r for r in cqs["prod-training"]["resources"] if r["resource"] == "nvidia.com/gpu")
    assert training["lendingLimit"] == 288 and training["potentialAvailable"] == 2280
    assert cohorts["research"]["resources"][0]["subtreeQuota"] is not None


def test_a_zero_weight_borrower_prints_infinity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = [d for d in yaml.safe_load_all(QUEUES.read_text()) if d]
    for d in docs:
        if d["kind"] == "ClusterQueue" and d["metadata"]["name"] == "llm-research":
            d["spec"]["fairSharing"] = {"weight": "0"}
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    code, out, _ = run(capsys, "queues", "--snapshot", str(path), "-o", "json")
    assert code == 0
    assert '"weightedShare": Infinity' in out
    assert by_name(json.loads(out)["clusterQueues"])["llm-research"]["roundedWeightedShare"] == 2**63 - 1


def test_fractional_cpu_is_shown_in_cores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "q.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": "small"},
                "spec": {
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory"],
                            "flavors": [
                                {
                                    "name": "default",
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": "1500m"},
                                        {"name": "memory", "nominalQuota": "1Gi"},
                                    ],
                                }
                            ],
                        }
                    ]
                },
            }
        )
    )
    code, out, _ = run(capsys, "queues", "--snapshot", str(path), "-o", "json")
    rows = json.loads(out)["clusterQueues"][0]["resources"]
    assert code == 0 and rows[0]["nominal"] == 1.5 and rows[1]["nominal"] == 2**30


def test_the_table_lists_queues_and_their_resources(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "queues", "--demo", "--now", "2026-12-01T11:00:00Z")
    assert code == 0
    assert "ClusterQueue   llm-research      research      2        113     nvidia.com/gpu   yes" in out
    assert "prod-inference    gb200/nvidia.com/gpu   264       0" in out


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        pytest.param(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": "a"},
                "spec": {
                    "cohortName": "c",
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [
                                {"name": "f", "resources": [{"name": "cpu", "nominalQuota": "4", "lendingLimit": "8"}]}
                            ],
                        }
                    ],
                },
            },
            "lendingLimit exceeds nominalQuota",
            id="lending above nominal",
        ),
        pytest.param(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}, "no ClusterQueues", id="no queues at all"
        ),
    ],
)
def test_contradictory_queues_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: dict[str, Any], message: str
) -> None:
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, out, err = run(capsys, "queues", "--snapshot", str(path))
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1


def test_a_bad_now_is_an_input_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "queues", "--demo", "--now", "tomorrow")
    assert code == 2 and "RFC 3339" in err


def test_the_bundled_demo_queues_are_the_example() -> None:
    from kilter.cli.sources import DEMO_QUEUES

    assert DEMO_QUEUES.read_text() == QUEUES.read_text()


def test_pending_lists_the_admission_order_and_preemption_targets(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "queues", "--snapshot", str(QUEUES), "--pending", "-o", "json", "--now", "2026-12-01T11:00:00Z"
    )
    assert code == 0
    pending = json.loads(out)["pending"]
    assert [(p["position"], p["workload"], p["outcome"]) for p in pending] == [
        (1, "train/gpt-prod-v8", "preempt"),
        (2, "vision/vision-sweep", "admit"),
        (3, "llm/llama-405b-eval", "wait"),
    ]
    # gpt-prod-v8 (576 GPUs) needs 232 more than the 344 available; S2-a takes mixtral (64) but then
    # refuses llama-70b, S2-b takes llama-70b, and fill-back returns mixtral.
    assert pending[0]["preempts"] == [
        {"workload": "llm/llama-70b-sft", "clusterQueue": "llm-research", "reason": "InCohortFairSharing"}
    ]
    assert pending[0]["flavors"] == {"cpu": "gb200", "nvidia.com/gpu": "gb200"}


def test_pending_without_fair_sharing_uses_the_classical_order(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "queues", "--snapshot", str(QUEUES), "--pending", "--fair-sharing", "off", "-o", "json")
    assert code == 0
    assert json.loads(out)["pending"][0]["workload"] == "vision/vision-sweep"


def test_unknown_strategies_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "queues", "--demo", "--pending", "--strategies", "Whatever")
    assert code == 2 and "--strategies" in err


def test_admission_fair_sharing_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "queues", "--demo", "--pending", "--afs-half-life", "168h", "-o", "json")
    assert code == 0 and json.loads(out)["localQueues"] == []  # the demo queues are not in AFS mode
    code, _, err = run(capsys, "queues", "--demo", "--afs-weight", "memory=0")
    assert code == 2 and "--afs-half-life" in err
    code, _, err = run(capsys, "queues", "--demo", "--afs-half-life", "1h", "--afs-weight", "memory")
    assert code == 2 and "RESOURCE=WEIGHT" in err


@pytest.mark.parametrize("weight", ["nan", "inf", "-1", "x"])
def test_admission_fair_sharing_weights_must_be_finite_and_non_negative(
    capsys: pytest.CaptureFixture[str], weight: str
) -> None:
    code, _, err = run(capsys, "queues", "--demo", "--afs-half-life", "1h", "--afs-weight", f"cpu={weight}")
    assert code == 2 and "finite weight >= 0" in err

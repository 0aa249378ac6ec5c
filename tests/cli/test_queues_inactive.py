"""``kilter queues`` over a cohort cycle: the ClusterQueues under it are shown inactive with Kueue's reason.

Kueue accepts a cycle (no webhook can see one) and sets the ClusterQueues
under it ``Active: False``, reason ``CohortCycleDetected``; the command
shows the same and exits 0, naming them on stderr.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kilter.cli.main import main
from tests.extenders.volcano.conftest import cluster_queue


def cohort(name: str, parent: str = "") -> dict[str, Any]:
    spec = {"parentName": parent} if parent else {}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": name}, "spec": spec}


def cycle_objects() -> list[dict[str, Any]]:
    """Cohorts a -> b -> a with ClusterQueue training under b (cohortName pool -> a); research outside, in c."""
    training = cluster_queue("training", 64)
    training["spec"]["cohortName"] = "b"
    research = cluster_queue("research", 32)
    research["spec"]["cohortName"] = "c"
    return [cohort("a", "b"), cohort("b", "a"), cohort("c"), training, research]


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump_all(cycle_objects()))
    code = main(["queues", "--snapshot", str(path), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_cluster_queues_under_a_cohort_cycle_are_shown_inactive_with_kueues_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(tmp_path, capsys, "-o", "json")
    assert code == 0
    cqs = {q["name"]: q for q in json.loads(out)["clusterQueues"]}
    assert cqs["training"]["active"] is False
    assert cqs["training"]["inactive"] == {
        "reason": "CohortCycleDetected",
        "message": 'Can\'t admit new workloads: Cohort "b" has a cycle in hierarchy.',
    }
    assert cqs["research"]["active"] is True and "inactive" not in cqs["research"]
    assert err.count("\n") == 1 and "ClusterQueue training is inactive" in err


def test_the_table_lists_what_is_inactive_and_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(tmp_path, capsys)
    assert code == 0
    rows = [line.split() for line in out.splitlines()]
    inactive = {(r[0], r[1]) for r in rows if len(r) > 2 and r[2] == "CohortCycleDetected"}
    assert inactive == {("ClusterQueue", "training"), ("Cohort", "a"), ("Cohort", "b")}

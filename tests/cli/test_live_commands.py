"""Commands pointed at a running cluster (``--kubeconfig``) list it once and answer as they do for a snapshot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kilter.cli.main import main
from tests.conftest import REPO
from tests.listwatch import NODES, PODS, ListWatchServer, Resource
from tests.live_mode import kubeconfig

QUEUES = REPO / "examples" / "queues" / "ai-platform.yaml"
KUEUE = [
    Resource("kueue.x-k8s.io", "v1beta2", plural, kind, namespaced=namespaced)
    for plural, kind, namespaced in (
        ("clusterqueues", "ClusterQueue", False),
        ("cohorts", "Cohort", False),
        ("resourceflavors", "ResourceFlavor", False),
        ("localqueues", "LocalQueue", True),
        ("workloads", "Workload", True),
        ("workloadpriorityclasses", "WorkloadPriorityClass", False),
    )
]
TOKEN = "commands"


def objects(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(path.read_text()):
        if doc:
            out.extend(doc["items"] if doc.get("kind") == "List" else [doc])
    return out


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_queues_from_a_live_cluster_match_the_same_objects_in_a_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ListWatchServer([NODES, PODS, *KUEUE], token=TOKEN) as cluster:
        for obj in objects(QUEUES):
            cluster.add(obj)
        config = kubeconfig(tmp_path / "kubeconfig", cluster.port, TOKEN)
        now = ("--now", "2026-12-01T11:00:00Z", "-o", "json")
        code, live, err = run(capsys, "queues", "--kubeconfig", str(config), *now)
        assert code == 0, err
        code, offline, _ = run(capsys, "queues", "--snapshot", str(QUEUES), *now)
        assert code == 0
        assert json.loads(live) == json.loads(offline)
        listed = {r.path for r in cluster.requests if "watch" not in r.query}
        assert "/apis/kueue.x-k8s.io/v1beta2/workloads" in listed  # listed once, never watched
        assert not any("watch" in r.query for r in cluster.requests)


def test_an_unreachable_cluster_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with ListWatchServer([NODES], token=TOKEN) as cluster:
        port = cluster.port
    config = kubeconfig(tmp_path / "kubeconfig", port, TOKEN)
    code, _, err = run(capsys, "queues", "--kubeconfig", str(config))
    assert code == 2 and err.count("\n") == 1 and "127.0.0.1" in err

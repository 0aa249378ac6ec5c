"""``kilter plan`` and ``kilter demo`` as a user runs them: outputs, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kilter.cli.main import main
from tests.conftest import REPO
from tests.extenders.conftest import pod_json
from tests.topology.builders import CLIQUE, TIER1, node_dict

JOBS = REPO / "examples" / "jobs"


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("snap") / "demo.yaml"
    assert main(["demo", "--write-snapshot", str(path), "-o", "json"]) == 0
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_json_has_the_promised_keys(snapshot: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "plan", "--snapshot", str(snapshot), "--job", str(JOBS / "pytorchjob-16x4.yaml"), "-o", "json"
    )
    assert code == 0
    data = json.loads(out)
    assert data["feasible"] is True
    assert data["reason"].startswith("16 pods, 64 GPUs in 1 scale-up domain")
    assert [(p["name"], p["count"], p["gpusPerPod"], len(p["nodes"])) for p in data["podSets"]] == [
        ("master", 1, 4, 1),
        ("worker", 15, 4, 15),
    ]
    assert len(data["domains"]) == 1 and data["domains"] == sorted(data["domains"])
    assert len(set(p["nodes"][0] for p in data["podSets"]) | set(data["podSets"][1]["nodes"])) == 16


def test_plan_yaml_and_table_outputs(snapshot: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "plan",
        "--snapshot",
        str(snapshot),
        "--job",
        str(JOBS / "jobset-48x4-sliced.yaml"),
        "-o",
        "yaml",
    )
    assert code == 0
    data = yaml.safe_load(out)
    assert len(data["domains"]) == 4 and len(data["blocks"]) == 1
    code, out, _ = run(capsys, "plan", "--snapshot", str(snapshot), "--job", str(JOBS / "jobset-48x4-sliced.yaml"))
    assert code == 0
    assert out.startswith("JobSet research/pretrain: PLACED - 48 pods, 192 GPUs in 4 scale-up domains under 1 tier-1")
    assert "POD SET   PODS   GPUS/POD   DOMAIN" in out


def test_an_infeasible_plan_prints_the_reason_and_exits_1(
    tmp_path: Path, snapshot: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = yaml.safe_load((JOBS / "job-full-rack.yaml").read_text())
    job["spec"]["parallelism"] = job["spec"]["completions"] = 19
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    code, out, _ = run(capsys, "plan", "--snapshot", str(snapshot), "--job", str(path), "-o", "json")
    assert code == 1
    data = json.loads(out)
    assert data["feasible"] is False
    assert "requires one scale-up domain for 19 pods x 4 GPUs" in data["reason"]
    assert data["podSets"] == [] and data["domains"] == []


def test_the_launcher_without_gpus_is_listed_as_ignored(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "--demo", "--job", str(JOBS / "mpijob-mi355x.yaml"), "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert data["ignoredPodSets"] == ["launcher"] and data["platform"] == "MI355X-8"


@pytest.mark.parametrize(
    ("job_text", "message"),
    [
        pytest.param(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n",
            "unsupported kind",
            id="unknown kind",
        ),
        pytest.param("kind: [\n", "not valid YAML", id="malformed YAML"),
        pytest.param(
            "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n    spec:\n"
            "      containers: [{name: c}]\n",
            "no pod set asks for GPUs",
            id="a job without GPUs",
        ),
        pytest.param(
            "---\napiVersion: v1\nkind: Pod\n---\napiVersion: v1\nkind: Pod\n",
            "exactly one job",
            id="two documents",
        ),
    ],
)
def test_bad_jobs_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], job_text: str, message: str
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(job_text)
    code, out, err = run(capsys, "plan", "--demo", "--job", str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err


def test_an_unknown_platform_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "--demo", "--platform", "TPU-v7", "--job", str(JOBS / "pytorchjob-16x4.yaml"))
    assert code == 2 and "unknown platform 'TPU-v7'" in err


def test_plan_needs_a_source(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "--job", str(JOBS / "pytorchjob-16x4.yaml"))
    assert code == 2 and "--snapshot" in err


def plan_over(tmp_path: Path, node_status: str) -> subprocess.CompletedProcess[str]:
    snap = tmp_path / "snap.yaml"
    snap.write_text(f"apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Node\n  status: {node_status}\n")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "kilter.cli",
            "plan",
            "--snapshot",
            str(snap),
            "--job",
            str(JOBS / "pytorchjob-16x4.yaml"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_broken_snapshot_exits_2_without_a_traceback(tmp_path: Path) -> None:
    result = plan_over(tmp_path, '{allocatable: "oops"}')
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "status.allocatable" in result.stderr


def test_a_node_with_a_fractional_gpu_count_is_ignored_with_a_warning_not_a_traceback(tmp_path: Path) -> None:
    # One such Node must not refuse the whole snapshot; with no other node, the plan finds no room (exit 1).
    result = plan_over(tmp_path, "{allocatable: {nvidia.com/gpu: 2.5}}")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "whole number" in result.stderr and "node ignored" in result.stderr


def test_demo_plans_prints_the_fleet_and_every_example_plan(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "demo", "--plans")
    assert code == 0
    assert "GB200-NVL72   576     32" in out
    for title in (
        "PyTorchJob research/llama-finetune",
        "JobSet research/pretrain",
        "Job research/full-rack",
        "MPIJob research/rccl-train",
        "deepseek-serve/group-1",
    ):
        assert title in out
    assert "train/gpt-prod-v8     prod-training     1000       56.5    preempt   llm/llama-70b-sft" in out


def test_demo_plans_json_carries_fleet_plans_and_queues(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "demo", "--plans", "-o", "json")
    data = json.loads(out)
    assert code == 0 and set(data) == {"fleet", "levels", "plans", "queues"}
    assert len(data["plans"]) == 5 and len(data["queues"]["pending"]) == 3


def test_demo_jobs_are_the_examples() -> None:
    from kilter.cli.demo import DEMO_JOBS

    bundled = [d for d in yaml.safe_load_all(DEMO_JOBS.read_text()) if d]
    examples = [yaml.safe_load(p.read_text()) for p in sorted(JOBS.glob("*.yaml"))]
    assert sorted(json.dumps(d, sort_keys=True) for d in bundled) == sorted(
        json.dumps(d, sort_keys=True) for d in examples
    )


def test_plan_json_lists_each_pod_sets_nodes_in_rank_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Four racks in two blocks, partly busy, so 40 pods x 2 GPUs span several racks; blocks sort b0 before b1,
    # racks by name within a block, trays by name within a rack, and a tray's two pods are neighbours.
    racks = {"ra": ("b1", 12), "rb": ("b0", 14), "rc": ("b1", 10), "rd": ("b0", 9)}  # rack: (block, busy trays)
    objects: list[dict[str, Any]] = []
    for rack, (block, busy) in racks.items():
        for t in range(18):
            objects.append(node_dict(f"{rack}-t{t:02d}", labels={CLIQUE: rack, TIER1: block}))
        objects.extend(pod_json(f"busy-{rack}-{t}", 4, node=f"{rack}-t{t:02d}") for t in range(busy))
    snapshot = tmp_path / "snapshot.json"
    snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "ranked", "namespace": "ml"},
        "spec": {
            "completionMode": "Indexed",
            "parallelism": 40,
            "completions": 40,
            "template": {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}},
        },
    }
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    code, out, _ = run(capsys, "plan", "--snapshot", str(snapshot), "--job", str(path), "-o", "json")
    assert code == 0
    nodes = json.loads(out)["podSets"][0]["nodes"]
    assert len(nodes) == 40 and len({n.split("-")[0] for n in nodes}) > 1
    block_of = {rack: b for rack, (b, _) in racks.items()}
    assert nodes == sorted(nodes, key=lambda n: (block_of[n.split("-")[0]], n))  # index 0 first, ranks in that order
    assert all(nodes.count(n) == 2 and nodes[nodes.index(n) + 1] == n for n in set(nodes))

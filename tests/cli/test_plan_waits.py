"""``kilter plan`` and ``kilter admission-check`` say when a preferred gang would wait for fewer domains."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.kubectl.served import ServedViews
from kilter.cli.main import main
from kilter.gangs.store_starts import StartsOfStore
from kilter.state.store import ClusterStore
from tests.extenders.conftest import write_snapshot
from tests.gangs.wait_scenario import FREE, finished_workload, fleet_objects, queue_objects
from tests.webhooks.test_admissioncheck import CHECK, admission_check, workload

NOW = "2026-12-01T12:00:00Z"


def batch_job(*, created: str | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A batch Job of four 4-GPU pods in LocalQueue team; its template declares ``annotations``."""
    meta: dict[str, Any] = {"name": "train", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team"}}
    if created:
        meta["creationTimestamp"] = created
    container = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "4"}}}
    template = {"metadata": {"annotations": annotations or {}}, "spec": {"containers": [container]}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"parallelism": 4, "template": template}}


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    snapshot = tmp_path / "cluster.json"
    write_snapshot(snapshot, [*fleet_objects(), *queue_objects()])
    return snapshot, tmp_path / "job.json"


def plan(capsys: pytest.CaptureFixture[str], snapshot: Path, job: Path, *extra: str) -> tuple[int, str]:
    code = main(["plan", "--snapshot", str(snapshot), "--job", str(job), "--now", NOW, *extra])
    return code, capsys.readouterr().out


def test_a_job_not_created_yet_would_wait_its_whole_budget(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot, job = files
    job.write_text(json.dumps(batch_job(annotations={"kilter.dev/expected-runtime": "10h"})))
    code, out = plan(capsys, snapshot, job)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "Job ml/train: WAITS - waiting up to 2h for room in 1 domain; 2 available now"
    assert lines[1] == "then: 4 pods, 16 GPUs in 2 scale-up domains under 1 tier-1 of GB200-NVL72"
    code, out = plan(capsys, snapshot, job, "-o", "json")
    data = json.loads(out)
    assert code == 0 and data["feasible"] is True and data["waiting"] is True
    [gang] = data["gangs"]
    assert gang["waitReason"] == "waiting up to 2h for room in 1 domain; 2 available now"
    assert gang["waitSeconds"] == 7200 and sorted(gang["podSets"][0]["nodes"]) == FREE


def test_a_job_created_long_enough_ago_is_placed_and_the_flags_set_the_defaults(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot, job = files
    notes = {"kilter.dev/expected-runtime": "10h"}
    job.write_text(json.dumps(batch_job(created="2026-12-01T11:00:00Z", annotations=notes)))
    code, out = plan(capsys, snapshot, job)
    assert out.startswith("Job ml/train: WAITS - waiting up to 1h for room")  # an hour of its 2 h gone
    code, out = plan(capsys, snapshot, job, "--split-wait-max", "30m")
    assert code == 0 and out.startswith("Job ml/train: PLACED - 4 pods")
    code, out = plan(capsys, snapshot, job, "--split-wait", "0", "-o", "json")
    assert json.loads(out)["waiting"] is False and json.loads(out)["gangs"][0]["waitReason"] == ""


def test_the_runtime_is_learned_from_the_snapshots_finished_workloads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot, job = tmp_path / "cluster.json", tmp_path / "job.json"
    history = [finished_workload(f"done-{h}", h) for h in (9, 10, 11)]
    write_snapshot(snapshot, [*fleet_objects(), *queue_objects(), *history])
    job.write_text(json.dumps(batch_job()))
    assert plan(capsys, snapshot, job)[1].startswith("Job ml/train: WAITS - waiting up to 2h for room")


def test_a_bad_flag_or_annotation_is_one_line_and_exit_2(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot, job = files
    job.write_text(json.dumps(batch_job(annotations={"kilter.dev/expected-runtime": "10h"})))
    assert main(["plan", "--snapshot", str(snapshot), "--job", str(job), "--split-wait", "much"]) == 2
    assert "--split-wait must be a number" in capsys.readouterr().err
    job.write_text(json.dumps(batch_job(annotations={"kilter.dev/split-wait": "x"})))
    assert main(["plan", "--snapshot", str(snapshot), "--job", str(job), "--now", NOW]) == 2
    assert "kilter.dev/split-wait: 'x' is not a number" in capsys.readouterr().err


def test_the_admission_check_command_shows_the_wait(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wl = workload("wait", 4)
    wl["metadata"]["annotations"] = {"kilter.dev/expected-runtime": "10h"}  # created 09:59, quota reserved 10:00
    snapshot = tmp_path / "cluster.json"
    write_snapshot(snapshot, [*fleet_objects(), admission_check(CHECK, "kilter.dev/topology"), wl])
    args = ["admission-check", "--snapshot", str(snapshot), "--now", "2026-12-01T10:59:00Z", "-o", "json"]
    assert main(args) == 0
    [entry] = json.loads(capsys.readouterr().out)["workloads"]
    check = entry["admissionCheck"]
    assert check["state"] == "Pending" and "requeueAfterSeconds" not in check and "podSetUpdates" not in check
    assert check["message"] == "waiting until 2026-12-01T12:00:00Z for room in 1 domain; 2 available now"
    assert check["lastTransitionTime"] == "2026-12-01T10:00:00Z"  # the entry's own: Pending it was, Pending it stays


def test_a_served_plan_learns_runtimes_over_the_servers_own_window() -> None:
    """A running kilter answering ``kubectl kilter plan`` learns as it was told to (``--runtime-window``), not as
    a reading of the same objects with the default window would."""
    history = [finished_workload(f"done-{i}", h) for i, h in enumerate((1, 1, 10))]  # 10 h finished last
    store = ClusterStore()
    store.replace([*fleet_objects(), *queue_objects(), *history])
    body = {"argv": ["plan", "-f", "job.json", "--now", NOW, "-o", "json"], "job": json.dumps(batch_job())}

    def waited(window: int | None) -> float:
        starts = None if window is None else StartsOfStore(store, time.time, window=window)
        status, answer = ServedViews(store, None, starts).answer(json.dumps(body).encode())
        assert status == 200
        [gang] = json.loads(json.loads(answer)["output"])["gangs"]
        seconds: float = gang["waitSeconds"]
        return seconds

    assert waited(None) == 720  # the median of all three: 1 h, x 0.2 x 1 extra domain
    assert waited(1) == 7200  # the last one only: 10 h

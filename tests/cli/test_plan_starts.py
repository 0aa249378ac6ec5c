"""``kilter plan --now`` says when a job would start: now when it fits, else the reservation it would get behind
the cluster's pending gangs (``tests.gangs.starts_scenario``: rack-a on r1 from NOW + 1h to + 4h, rack-b on r1
until + 5h, r2 frees at + 4h)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.main import main
from tests.extenders.conftest import write_snapshot
from tests.gangs import starts_scenario as sc

NOW = "2026-05-28T20:26:40Z"  # starts_scenario.NOW


def job(pods: int, runtime: str | None) -> dict[str, Any]:
    """A batch Job of ``pods`` 4-GPU pods in LocalQueue team, declaring ``runtime`` on its template."""
    container = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "4"}}}
    notes = {"kilter.dev/expected-runtime": runtime} if runtime else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team"}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "template": {"metadata": {"annotations": notes}, "spec": {"containers": [container]}},
        },
    }


def plan(capsys: pytest.CaptureFixture[str], tmp_path: Path, manifest: dict[str, Any], *extra: str) -> tuple[int, str]:
    snapshot, path = tmp_path / "cluster.json", tmp_path / "job.json"
    write_snapshot(snapshot, sc.objects())
    path.write_text(json.dumps(manifest))
    code = main(["plan", "--snapshot", str(snapshot), "--job", str(path), "--now", NOW, *extra])
    return code, capsys.readouterr().out


def test_a_job_that_cannot_start_now_is_told_its_reservation_behind_the_queue(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out = plan(capsys, tmp_path, job(18, "1h"), "-o", "json")
    data = json.loads(out)
    assert code == 1 and data["feasible"] is False  # as before: it does not fit now
    # a whole rack for 1 h: r1 is rack-a's, then rack-b's until + 5h; r2 frees at + 4h
    assert (data["expectedStart"], data["reservedDomains"]) == ("2026-05-29T00:26:40Z", ["r2"])
    assert data["expectedStartReason"] == "r2 is reserved for ml/train from 2026-05-29T00:26:40Z"
    code, out = plan(capsys, tmp_path, job(18, "1h"))
    assert out.splitlines()[-1] == "expected start: 2026-05-29T00:26:40Z on r2"


def test_a_job_that_fits_now_starts_now(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out = plan(capsys, tmp_path, job(1, "1h"), "-o", "json")
    data = json.loads(out)
    assert code == 0 and data["feasible"] is True
    assert (data["expectedStart"], data["reservedDomains"]) == (NOW, [])


def test_a_job_without_an_estimate_is_reserved_room_no_later_gang_claims(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out = plan(capsys, tmp_path, job(18, None), "-o", "json")
    data = json.loads(out)
    # no runtime of its own: its reservation never ends, so it must wait for a rack no later gang claims
    assert code == 1 and (data["expectedStart"], data["reservedDomains"]) == ("2026-05-29T00:26:40Z", ["r2"])

"""``kilter simulate --node-mtbf``: failure metrics for each policy, the settings in the report, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_simulate_cli import run, write_inputs
from tests.conftest import SHARED_DATA

FAILURE_METRICS = {
    "failurePolicy",
    "failuresInjected",
    "gangsHitByFailures",
    "failureEvictions",
    "evictedOnSecondFailure",
    "goodput",
    "gpuHoursHeld",
    "gpuHoursLostToFailures",
    "repairs",
    "repairsSameDomainFraction",
    "meanResumeSeconds",
    "p95ResumeSeconds",
}


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    return write_inputs(tmp_path)


def test_simulate_with_failures_reports_what_they_cost_under_each_policys_own_recovery(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    fleet, trace = files
    code, out, _ = run(
        capsys, "simulate", "--fleet", str(fleet), "--trace", str(trace), "--policy", "kilter,kueue-tas,first-fit",
        "--node-mtbf", "5", "--repair-hours", "1", "--checkpoint-minutes", "5", "--spare-nodes-per-domain", "1",
        "-o", "json",
    )  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert data["failures"] == {
        "nodeMtbfHours": 5.0, "repairHours": 1.0, "checkpointMinutes": 5.0, "restartMinutes": 5.0, "policy": "auto",
    }  # fmt: skip
    assert data["spareNodesPerDomain"] == 1
    recovery = {name: m["failurePolicy"] for name, m in data["policies"].items()}
    assert recovery == {"kilter": "kilter", "kueue-tas": "kueue-tas", "first-fit": "requeue"}
    for name, m in data["policies"].items():
        assert set(m) >= FAILURE_METRICS, name
        assert m["completed"] == 60 and m["failuresInjected"] > 0, name
        assert 0 < m["goodput"] <= 1, name


def test_simulate_without_failures_prints_no_failure_metrics(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    fleet, trace = files
    code, out, _ = run(capsys, "simulate", "--fleet", str(fleet), "--trace", str(trace), "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert "failures" not in data and not FAILURE_METRICS & set(data["policies"]["kilter"])


def test_simulate_table_gains_the_failure_columns(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    fleet, trace = files
    code, out, _ = run(
        capsys, "simulate", "--fleet", str(fleet), "--trace", str(trace), "--node-mtbf", "5",
        "--failure-policy", "requeue",
    )  # fmt: skip
    assert code == 0
    header, row = out.splitlines()[:2]
    assert "GOODPUT" in header and "LOST GPU-h" in header and "P95 RESUME s" in header
    assert row.split()[0] == "kilter" and "requeue" in row.split()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--repair-hours", "2"], "--repair-hours needs --node-mtbf"),
        (["--failure-policy", "requeue"], "--failure-policy needs --node-mtbf"),
        (["--node-mtbf", "0"], "--node-mtbf must be a number of hours above 0"),
        (["--node-mtbf", "nan"], "--node-mtbf must be a number of hours above 0"),
        (["--node-mtbf", "10", "--checkpoint-minutes", "-5"], "--checkpoint-minutes must be 0 or more"),
        (["--node-mtbf", "10", "--restart-minutes", "-1"], "--restart-minutes must be 0 or more"),
    ],
)
def test_simulate_bad_failure_flags_exit_2_with_one_line(
    files: tuple[Path, Path], args: list[str], message: str
) -> None:
    fleet, trace = files
    result = subprocess.run(
        [sys.executable, "-m", "kilter.cli", "simulate", "--fleet", str(fleet), "--trace", str(trace), *args],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_simulate_injects_failures_into_the_real_philly_trace_when_it_is_there(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    philly = SHARED_DATA / "traces" / "philly" / "philly.csv"
    if not philly.is_file():
        pytest.skip(f"the real Philly trace is not at {philly} (it lives in ../shared next to the repository)")
    code, out, _ = run(
        capsys, "simulate", "--fleet", str(files[0]), "--trace", str(philly), "--limit", "500", "--gpu-scale", "4",
        "--policy", "kilter,kueue-tas", "--node-mtbf", "200", "-o", "json",
    )  # fmt: skip
    assert code == 0
    for name, m in json.loads(out)["policies"].items():
        assert m["completed"] + m["neverFit"] == 500, name
        assert m["failuresInjected"] > 0, name


def test_simulate_injects_failures_under_volcano_queues(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    fleet, trace = files
    code, out, _ = run(
        capsys, "simulate", "--fleet", str(fleet), "--trace", str(trace), "--node-mtbf", "5", "--quota", "volcano",
        "--policy", "kilter,kueue-tas", "-o", "json",
    )  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert data["quota"] == "volcano" and data["failures"]["nodeMtbfHours"] == 5
    for name in ("kilter", "kueue-tas"):
        m = data["policies"][name]
        assert m["failuresInjected"] > 0 and m["gangsHitByFailures"] > 0
        assert m["failurePolicy"] == name  # each policy's own recovery, as under Kueue's admission
    assert data["policies"]["kilter"]["repairs"] > 0 and data["policies"]["kueue-tas"]["failureEvictions"] > 0

"""``kilter simulate --maintenance SPEC`` as a user runs it: the spec, the rollouts side by side, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kilter.cli.main import main
from kilter.model.errors import InputError
from kilter.sim.maintenance_spec import DEFAULT_STEP_S, MaintenanceSettings, parse_maintenance

FLEET = "platforms:\n- {platform: GB200-NVL72, domains: 4, domainsPerBlock: 2, unhealthyNodes: 1}\n"
TRACE = "submit_time,duration,gpus\n" + "".join(
    f"{i * 300},{1800 + (i * 911) % 20000},{(4, 8, 16, 32, 64, 100)[i % 6]}\n" for i in range(60)
)


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    fleet, trace = tmp_path / "fleet.yaml", tmp_path / "trace.csv"
    fleet.write_text(FLEET)
    trace.write_text(TRACE)
    return fleet, trace


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("at=3d,step=4h,k=2", MaintenanceSettings(3 * 86400, 4 * 3600, 2), id="the issue's example"),
        pytest.param("k=4", MaintenanceSettings(0.0, DEFAULT_STEP_S, 4), id="defaults: at once, 4h a domain"),
        pytest.param(
            " wait=90m , window=2d,at=1h30m ",
            MaintenanceSettings(5400, DEFAULT_STEP_S, 1, 5400, 2 * 86400),
            id="any order, spaces, durations as annotations write them",
        ),
    ],
)
def test_a_spec_reads_as_its_settings(text: str, want: MaintenanceSettings) -> None:
    assert parse_maintenance(text) == want


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected key=value items"),
        ("k=2,", "expected key=value items"),
        ("k=0", "k='0' must be a whole number"),
        ("k=two", "k='two' must be a whole number"),
        ("step=0s", "step must be longer than 0s"),
        ("step=soon", "'soon' is not a duration"),
        ("at=1d,at=2d", "at is given twice"),
        ("speed=fast", "'speed=fast' is not one of"),
        ("k", "'k' is not one of"),
    ],
)
def test_a_bad_spec_is_refused_naming_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        parse_maintenance(text)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--maintenance", "k=0"], "--maintenance: k='0'"),
        (["--maintenance", "step=-1h"], "is not a duration"),
        (["--maintenance", "k=1", "--policy", "kilter,spread"], "give one --policy"),
        (["--maintenance", "k=1", "--regions", "2"], "--maintenance cannot be combined with --regions"),
        (["--maintenance", "k=1", "--repair-hours", "2"], "--repair-hours needs --node-mtbf"),
        (["--checkpoint-minutes", "10"], "--checkpoint-minutes needs --node-mtbf"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    files: tuple[Path, Path], args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet, trace = files
    code = main(["simulate", "--fleet", str(fleet), "--trace", str(trace), *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_a_bad_spec_never_shows_a_traceback(files: tuple[Path, Path]) -> None:
    fleet, trace = files
    result = subprocess.run(
        [sys.executable, "-m", "kilter.cli", "simulate", "--fleet", str(fleet), "--trace", str(trace),
         "--maintenance", "at=soon"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_json_has_no_rollout_then_kilter_then_naive_each_over_every_domain(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    fleet, trace = files
    args = ["--maintenance", "at=2h,step=2h,k=2,window=1d", "--checkpoint-minutes", "20", "-o", "json"]
    assert main(["simulate", "--fleet", str(fleet), "--trace", str(trace), *args]) == 0
    data = json.loads(capsys.readouterr().out)
    rollouts = data["rollouts"]
    assert list(rollouts) == ["none", "kilter", "naive"]
    assert "jobsKilled" not in rollouts["none"]
    for order in ("kilter", "naive"):
        m = rollouts[order]
        assert m["maintenanceOrder"] == order
        assert m["domainsMaintained"] == 4 and m["mostDomainsOut"] <= 2
        assert m["completed"] == m["jobs"] == 60
        assert m["withinWindow"] is True
        assert "failuresInjected" not in m  # no node failed: the failure figures are not shown
    assert rollouts["naive"]["rolloutHours"] == 2 * 2.0  # two steps of two racks, 2 h each
    assert data["maintenance"]["checkpointMinutes"] == 20
    assert "failures" not in data


def test_the_table_shows_the_three_rollouts_side_by_side(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    fleet, trace = files
    assert main(["simulate", "--fleet", str(fleet), "--trace", str(trace), "--maintenance", "at=1h,k=1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["MAINTENANCE", "DOMAINS", "STEPS", "KILLED"]
    assert [line.split()[0] for line in lines[1:4]] == ["none", "kilter", "naive"]
    assert lines[2].split()[1:3] == ["4", "4"]  # four racks, one a step
    assert "k=1" in lines[-1] and "runtime estimates learned" in lines[-1]


@pytest.mark.parametrize("quota", ["fifo", "volcano"])
def test_node_failures_and_a_rollout_run_together_in_one_run(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str], quota: str
) -> None:
    # 72 trays failing every 20 h each over a trace of some 10 h: each rollout meets failures, and still maintains
    # every rack and runs every job; the failure figures are shown beside the rollout's, also under Volcano's queues.
    fleet, trace = files
    args = ["--maintenance", "at=2h,step=2h,k=2", "--node-mtbf", "20", "--repair-hours", "1", "--quota", quota]
    assert main(["simulate", "--fleet", str(fleet), "--trace", str(trace), *args, "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["quota"] == quota and data["failures"]["nodeMtbfHours"] == 20
    for order in ("none", "kilter", "naive"):
        m = data["rollouts"][order]
        assert m["failuresInjected"] > 0 and m["completed"] == m["jobs"] == 60
        if order != "none":
            assert m["domainsMaintained"] == 4 and m["rolloutHours"] is not None
            assert "jobsKilled" in m and "gpuHoursLostToFailures" in m

"""``--health-signals FILE`` as a user passes it to ``kilter plan``, ``simulate``, ``serve`` and ``kubectl kilter``:
the file replaces the defaults or extends them, and a bad file is exit 2 with one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kilter.cli.kubectl.main import main as kubectl_main
from kilter.cli.main import main
from tests.conftest import REPO
from tests.topology.builders import CLIQUE, node_dict

CUSTOM = "signals:\n  - condition: GpuUnhealthy\n    source: site checker\n"
EXTENDED = "defaults: true\n" + CUSTOM


def _tray(t: int) -> dict[str, Any]:
    raw = node_dict(f"r1-t{t:02d}", labels={CLIQUE: "r1"})
    if t in (3, 4):  # a signal of this site's own checker, none of kilter's defaults
        raw["status"]["conditions"].append({"type": "GpuUnhealthy", "status": "True"})
    if t == 9:  # NVSentinel's memory watch: a default signal
        raw["status"]["conditions"].append({"type": "GpuMemWatch", "status": "True"})
    return raw


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """An 18-tray GB200 rack, 3 of its trays marked by health signals; the signal files; jobs of 16 and 17 trays."""
    out = {"snapshot": tmp_path / "rack.json", "custom": tmp_path / "custom.yaml", "extended": tmp_path / "ext.yaml"}
    out["snapshot"].write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [_tray(t) for t in range(18)]}))
    out["custom"].write_text(CUSTOM)
    out["extended"].write_text(EXTENDED)
    out["bad"] = tmp_path / "bad.yaml"
    out["bad"].write_text("signals:\n  - condition: GpuUnhealthy\n    status: Broken\n")
    job = yaml.safe_load((REPO / "examples" / "jobs" / "job-full-rack.yaml").read_text())
    for trays in (16, 17):
        job["spec"]["parallelism"] = job["spec"]["completions"] = trays
        out[f"job{trays}"] = tmp_path / f"job{trays}.yaml"
        out[f"job{trays}"].write_text(yaml.safe_dump(job))
    return out


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("signals", "job", "fits"),
    [
        pytest.param(None, "job17", True, id="defaults: tray 9 unusable, 17 left, 17 fit"),
        pytest.param("custom", "job17", False, id="replaced: trays 3 and 4 unusable, 16 left, 17 do not fit"),
        pytest.param("custom", "job16", True, id="replaced: 16 left, 16 fit"),
        pytest.param("extended", "job16", False, id="extended: trays 3, 4 and 9 unusable, 15 left, 16 do not fit"),
    ],
)
def test_kilter_plan_judges_trays_by_the_signals_in_force(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], signals: str | None, job: str, fits: bool
) -> None:
    extra: list[str | Path] = ["--health-signals", files[signals]] if signals else []
    code, out, err = run(capsys, "plan", "--snapshot", files["snapshot"], "--job", files[job], "-o", "json", *extra)
    assert code == (0 if fits else 1), err
    assert json.loads(out)["feasible"] is fits


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["plan", "--job", "{job16}", "--snapshot", "{snapshot}"], id="plan"),
        pytest.param(["serve", "--snapshot", "{snapshot}", "--grpc-port", "0"], id="serve"),
        pytest.param(["simulate", "--fleet", "{snapshot}", "--trace", "synthetic:philly"], id="simulate"),
    ],
)
def test_a_bad_signal_file_exits_2_with_one_line(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    args = [a.format(**{k: str(v) for k, v in files.items()}) for a in command]
    code, out, err = run(capsys, *args, "--health-signals", files["bad"])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"kilter {command[0]}: health signals file ")
    assert "(at $.signals[0].status.0)" in err


def test_a_missing_signal_file_exits_2_with_one_line(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    missing = files["bad"].with_name("nowhere.yaml")
    code, _, err = run(
        capsys, "plan", "--snapshot", files["snapshot"], "--job", files["job16"], "--health-signals", missing
    )
    assert code == 2 and err.count("\n") == 1 and "cannot read health signals file" in err


def test_kilter_queues_takes_no_signal_file(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["queues", "--snapshot", str(files["snapshot"]), "--health-signals", str(files["custom"])])
    assert exit_.value.code == 2  # argparse: quota views never judge nodes
    assert "kilter queues: error: unrecognized argument --health-signals" in capsys.readouterr().err


def _kubectl(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = kubectl_main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_kubectl_kilter_domains_names_each_unusable_tray_and_why(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _kubectl(
        capsys, "domains", "--snapshot", files["snapshot"], "--health-signals", files["extended"], "-o", "json"
    )
    assert code == 0, err
    (domain,) = json.loads(out)["domains"]
    assert domain["nodesHealthy"] == 15 and domain["nodesTotal"] == 18
    assert domain["unusableNodes"] == [
        {"node": "r1-t03", "reason": "condition GpuUnhealthy=True (site checker)"},
        {"node": "r1-t04", "reason": "condition GpuUnhealthy=True (site checker)"},
        {"node": "r1-t09", "reason": "condition GpuMemWatch=True (NVSentinel)"},
    ]
    code, out, _ = _kubectl(capsys, "domains", "--snapshot", files["snapshot"], "-o", "wide")
    assert code == 0
    assert out.splitlines()[1].endswith("r1-t09: condition GpuMemWatch=True (NVSentinel)")


def test_kubectl_kilter_refuses_a_bad_signal_file_in_one_line(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _kubectl(capsys, "domains", "--snapshot", files["snapshot"], "--health-signals", files["bad"])
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "health signals file" in err and "condition signal" in err

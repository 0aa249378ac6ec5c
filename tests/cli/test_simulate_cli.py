"""``kilter simulate`` and ``kilter demo`` as a user runs them: the promised metrics, comparisons, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kilter.cli.main import main
from kilter.sim.policies import POLICIES
from tests.conftest import SHARED_DATA

METRICS = {
    "jobs",
    "completed",
    "meanWaitSeconds",
    "p95WaitSeconds",
    "maxWaitSeconds",
    "meanJctSeconds",
    "classes",
    "p95BoundedSlowdown",
    "makespanSeconds",
    "utilization",
    "singleDomainFraction",
    "meanDomainsPerGang",
    "fragmentation",
    "jainFairness",
    "preemptions",
    "splitWaited",
    "splitWaitMeanSeconds",
    "splitWaitTookSplit",
}
FLEET = """
platforms:
- {platform: GB200-NVL72, domains: 4, domainsPerBlock: 2, unhealthyNodes: 3}
- {platform: MI355X, nodes: 8}
"""
TRACE = "submit_time,duration,gpus,queue\n" + "".join(
    f"{i * 30},{600 + (i * 37) % 900},{(1, 4, 8, 16, 32, 64)[i % 6]},{'ab'[i % 2]}\n" for i in range(60)
)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def write_inputs(directory: Path) -> tuple[Path, Path]:
    """``FLEET`` and ``TRACE`` written into ``directory``: (fleet file, trace file)."""
    fleet, trace = directory / "fleet.yaml", directory / "trace.csv"
    fleet.write_text(FLEET)
    trace.write_text(TRACE)
    return fleet, trace


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    return write_inputs(tmp_path)


def test_simulate_json_carries_every_promised_metric_for_each_policy(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    fleet, trace = files
    code, out, _ = run(
        capsys, "simulate", "--fleet", str(fleet), "--trace", str(trace), "--policy", "all", "-o", "json"
    )
    assert code == 0
    data = json.loads(out)
    assert list(data["policies"]) == list(POLICIES)
    assert {"kueue-tas", "kueue-tas-preferred", "kueue-tas-kilter-wait", "volcano-hypernode"} <= set(POLICIES)
    for name, m in data["policies"].items():
        assert set(m) >= METRICS, name
        assert m["jobs"] == 60 and m["completed"] == 60, name
        assert 0 < m["utilization"] <= 1, name
        classes = m["classes"]
        assert classes["oneDomain"]["jobs"] + classes["multiDomain"]["jobs"] == 60, name
    assert data["queueOf"] == {"a": "default", "b": "default"}
    assert (data["topologyRequest"], data["splitModel"]) == ("auto", "per-domain")
    versus = data["versusBest"]
    others = {n for n in POLICIES if n not in ("kilter", "kueue-tas-kilter-wait")}
    assert {versus[k]["best"] for k in ("meanJctSeconds", "oneDomainWait", "multiDomainWait")} <= others


def test_simulate_prints_a_table_with_one_row_per_policy(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    fleet, trace = files
    code, out, _ = run(capsys, "simulate", "--fleet", str(fleet), "--trace", str(trace), "--policy", "kilter,spread")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["POLICY", "JOBS", "DONE"]
    assert [line.split()[0] for line in lines[1:3]] == ["kilter", "spread"]
    at = lines.index("By job class (1-DOMAIN: jobs one scale-up domain can hold; MULTI-DOMAIN: the rest):")
    assert lines[at + 1].split()[:3] == ["POLICY", "1-DOMAIN", "JOBS"]
    assert [line.split()[0] for line in lines[at + 2 : at + 4]] == ["kilter", "spread"]
    assert lines[at + 5].startswith("kilter / best other policy: mean JCT ")
    assert lines[at + 5].count("(spread)") == 3


def test_simulate_reads_a_snapshot_as_the_fleet(
    tmp_path: Path, files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = tmp_path / "demo.yaml"
    assert main(["demo", "--plans", "--write-snapshot", str(snapshot), "-o", "json"]) == 0
    capsys.readouterr()
    code, out, _ = run(capsys, "simulate", "--fleet", str(snapshot), "--trace", str(files[1]), "-o", "json")
    assert code == 0
    assert json.loads(out)["policies"]["kilter"]["completed"] == 60


def test_simulate_runs_the_synthetic_philly_workload_with_fair_quota(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys, "simulate", "--fleet", str(files[0]), "--trace", "synthetic:philly", "--limit", "300",
        "--gpu-scale", "2", "--quota", "fair", "-o", "json",
    )  # fmt: skip
    assert code == 0
    m = json.loads(out)["policies"]["kilter"]
    assert m["jobs"] == 300 and m["completed"] + m["neverFit"] == 300


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "magic"], "unknown policy 'magic'"),
        (["--trace", "synthetic:nope"], "unknown synthetic profile 'nope'"),
        (["--trace", "/nonexistent.csv"], "/nonexistent.csv"),
        (["--gpu-scale", "0"], "--gpu-scale must be at least 1"),
        (["--fleet-text", "platforms: [{platform: TPU-v9, nodes: 4}]"], "TPU-v9"),
        (["--fleet-text", "platforms: [{platform: GB200-NVL72, domains: -1}]"], "whole number"),
        (["--fleet-text", "nodes: 3"], "'platforms'"),
        (["--split-wait", "-1"], "--split-wait must be between 0 and 100"),
        (["--split-wait-max", "soon"], "'soon' is not a duration"),
        (["--split-wait-slowdown", "fast"], "--split-wait-slowdown: expected a number from 0 to 100 or 'true'"),
        (["--split-wait-slowdown", "-0.5"], "--split-wait-slowdown"),
    ],
)
def test_simulate_bad_input_exits_2_with_one_line(
    tmp_path: Path, files: tuple[Path, Path], args: list[str], message: str
) -> None:
    fleet, trace = files
    if args[0] == "--fleet-text":
        fleet = tmp_path / "bad-fleet.yaml"
        fleet.write_text(args[1])
        args = []
    base = ["simulate", "--fleet", str(fleet), "--trace", str(trace)]
    result = subprocess.run(
        [sys.executable, "-m", "kilter.cli", *base, *args], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_simulate_reports_the_split_wait_settings_and_what_they_did(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    fleet, trace = files
    args = ("simulate", "--fleet", str(fleet), "--trace", str(trace), "--policy", "kilter,first-fit", "-o", "json")
    code, out, _ = run(capsys, *args, "--split-wait", "2", "--split-wait-max", "90m", "--runtime-estimate", "oracle")
    assert code == 0
    data = json.loads(out)
    assert data["splitWait"] == {
        "factor": 2.0,
        "maxSeconds": 5400.0,
        "runtimeEstimate": "oracle",
        "holds": "quota",
        "clock": "reserved",
        "splitSlowdown": 0.2,
        "policies": ["kilter"],
    }
    assert data["policies"]["first-fit"]["splitWaited"] == 0  # the rule is kilter's alone
    code, out, _ = run(capsys, "simulate", "--fleet", str(fleet), "--trace", str(trace))
    assert "SPLIT WAITS" in out.splitlines()[0]


def test_simulate_refuses_contradictory_quotas(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text(
        """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: a}
spec:
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gb200-nvl72
      resources: [{name: nvidia.com/gpu, nominalQuota: 8, borrowingLimit: -2}]
"""
    )
    code, _, err = run(capsys, "simulate", "--fleet", str(files[0]), "--trace", str(files[1]), "--queues", str(queues))
    assert code == 2
    assert "borrowingLimit" in err


def test_simulate_replays_the_real_philly_trace_when_it_is_there(
    capsys: pytest.CaptureFixture[str], files: tuple[Path, Path]
) -> None:
    philly = SHARED_DATA / "traces" / "philly" / "philly.csv"
    if not philly.is_file():
        pytest.skip(f"the real Philly trace is not at {philly} (it lives in ../shared next to the repository)")
    code, out, _ = run(
        capsys, "simulate", "--fleet", str(files[0]), "--trace", str(philly), "--limit", "500", "-o", "json"
    )
    assert code == 0
    data = json.loads(out)
    assert data["policies"]["kilter"]["jobs"] == 500
    assert set(data["queueOf"].values()) == {"default"}


def test_simulate_replays_volcano_queue_quota_when_asked(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    fleet, trace = files
    args = ("simulate", "--fleet", str(fleet), "--trace", str(trace), "--policy", "kilter,spread", "-o", "json")
    code, out, _ = run(capsys, *args, "--quota", "volcano")
    assert code == 0
    data = json.loads(out)
    assert data["quota"] == "volcano"
    for name in ("kilter", "spread"):
        m = data["policies"][name]
        assert set(m) >= METRICS and m["jobs"] == 60 and m["completed"] + m["neverFit"] == 60
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    assert "or volcano: each ClusterQueue is a Volcano Queue bound to it" in " ".join(capsys.readouterr().out.split())

"""``kilter maintenance plan`` on a snapshot and ``drain`` as a process against the list/watch test server: the
plan document round-trips, bad input exits 2 with one line, and a drain killed mid-way resumes to the end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kilter.cli.main import main
from kilter.lifecycle.plan_doc import read_plan
from kilter.lifecycle.progress import MAINTENANCE_DONE, progress_of
from kilter.model.annotations import LIFECYCLE
from kilter.topology.lifecycle import QUALIFICATION
from tests.extenders.conftest import pod_json
from tests.listwatch import NODES, PDBS, PODS, ListWatchServer
from tests.live_mode import kubeconfig
from tests.topology.builders import CLIQUE, node_dict

NOW = "2027-01-15T08:00:00Z"
TOKEN = "maintenance"


def fleet_objects() -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for rack in ("r1", "r2", "r3"):
        for t in range(2):
            objects.append(node_dict(f"{rack}-t{t}", labels={CLIQUE: rack, "rack": rack}))
    for name, node, gang, runtime in (
        ("long-0", "r1-t0", "long", None),
        ("long-1", "r1-t1", "long", None),
        ("short-0", "r2-t0", "short", "8h10m"),
    ):
        pod = pod_json(
            name,
            4,
            node=node,
            labels={"kilter.dev/gang": gang, "kilter.dev/gang-size": "2" if gang == "long" else "1"},
            annotations={"kilter.dev/expected-runtime": runtime} if runtime else None,
        )
        pod["metadata"]["creationTimestamp"] = "2027-01-15T00:00:00Z"
        pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        objects.append(pod)
    return objects


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": fleet_objects()}))
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_prints_the_steps_and_the_rolling_drain_beside_them(
    snapshot: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "maintenance", "plan", "--snapshot", str(snapshot), "--all-domains", "--now", NOW)
    assert code == 0
    assert "kilter (exact)" in out and "rolling drain in name order" in out
    rows = [line.split() for line in out.splitlines()[1:] if line[:1].isdigit()]
    assert sorted(row[1] for row in rows) == ["r1", "r2", "r3"]
    assert [int(row[0]) for row in rows] == [0, 1, 2], "one domain at a time by default"


def test_plan_json_is_the_document_drain_reads(snapshot: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "maintenance", "plan", "--snapshot", str(snapshot), "--nodes", "rack!=r3", "--now", NOW,
        "--max-unavailable-domains", "2", "--step-duration", "1h", "-o", "json",
    )  # fmt: skip
    assert code == 0
    doc = read_plan(json.loads(out), where="stdout")
    assert sorted(n for s in doc.steps for d in s.domains for n in d.nodes) == ["r1-t0", "r1-t1", "r2-t0", "r2-t1"]
    assert doc.max_unavailable_domains == 2 and doc.step_seconds == 3600
    short = next(d for s in doc.steps for d in s.domains if d.domain == "r2")
    assert short.waits_for == ["ml/gang/short"], "10 minutes left: waiting idles less than killing 8 h of work"
    assert doc.naive.jobs_killed == 2 and doc.jobs_killed == 1
    assert doc.lost_gpu_hours < doc.naive.lost_gpu_hours


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--domains", "r9"], "no GPU domain named 'r9'"),
        (["--domains", "r1", "--max-unavailable-domains", "0"], "at least 1"),
        (["--domains", "r1", "--window", "tomorrow"], "START/DURATION"),
        (["--domains", "r1", "--step-duration", "0s"], "longer than 0s"),
        (["--domains", "r1", "--max-wait", "soon"], "not a duration"),
        (["--nodes", "rack=r9"], "selects no GPU node"),
        (["--nodes", "=x"], "without a key"),
    ],
)
def test_plan_refuses_bad_input_with_one_line(
    snapshot: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, out, err = run(capsys, "maintenance", "plan", "--snapshot", str(snapshot), "--now", NOW, *args)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "maintenance.json"),
        ('{"apiVersion": "kilter.dev/v1alpha1", "kind": "MaintenancePlan"}', "missing required field"),
        ("[1, 2]", "Expected `object`"),
        ('{"a":' * 5000 + "1" + "}" * 5000, "nests deeper than"),
        ("- " * 2000 + "x", "maximum nesting depth"),
    ],
)
def test_drain_refuses_a_bad_plan_before_touching_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    plan = tmp_path / "maintenance.json"
    plan.write_text(content)
    code, _, err = run(capsys, "maintenance", "drain", str(plan), "--kubeconfig", str(tmp_path / "nowhere"))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


@pytest.fixture
def server() -> Iterator[ListWatchServer]:
    with ListWatchServer([NODES, PODS, PDBS], token=TOKEN) as s:
        for obj in fleet_objects():
            s.add(obj)
        yield s


def drain_process(plan: Path, config: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kilter.cli",
            "maintenance",
            "drain",
            str(plan),
            "--kubeconfig",
            str(config),
            "--poll",
            "0.1s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def until(check: Any, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_drain_process_killed_mid_way_resumes_and_finishes(
    server: ListWatchServer, snapshot: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "maintenance", "plan", "--snapshot", str(snapshot), "--domains", "r1", "-o", "yaml")
    assert code == 0
    plan = tmp_path / "plan.yaml"
    plan.write_text(out)
    config = kubeconfig(tmp_path / "kubeconfig", server.port, TOKEN)

    def label(node: str, key: str) -> str | None:
        return (server.get_object(NODES, None, node)["metadata"].get("labels") or {}).get(key)

    def set_label(node: str, key: str, value: str) -> None:
        obj = server.get_object(NODES, None, node)
        obj["metadata"]["labels"][key] = value
        server.update(obj)

    first = drain_process(plan, config)
    try:
        until(lambda: all(label(n, LIFECYCLE) == "maintenance" for n in ("r1-t0", "r1-t1")), "maintenance")
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=10)
    assert {p["metadata"]["name"] for p in server.list_objects(PODS)} == {"short-0"}, "r1's gang was evicted"
    for n in ("r1-t0", "r1-t1"):
        set_label(n, MAINTENANCE_DONE, "true")

    second = drain_process(plan, config)
    try:
        until(lambda: all(label(n, LIFECYCLE) == "qualifying" for n in ("r1-t0", "r1-t1")), "re-qualification")
        for n in ("r1-t0", "r1-t1"):
            set_label(n, QUALIFICATION, "passed")
        output, _ = second.communicate(timeout=30)
    finally:
        second.kill()
        second.communicate(timeout=10)
    assert second.returncode == 0, output
    assert "every step done" in output and "cordon" not in output, "the second process did not cordon again"
    for n in ("r1-t0", "r1-t1"):
        node = server.get_object(NODES, None, n)
        assert label(n, LIFECYCLE) == "ready" and not node["spec"].get("unschedulable")
        progress = progress_of(node)
        assert progress is not None and progress.phase == "done"
    assert not server.get_object(NODES, None, "r2-t0").get("spec", {}).get("unschedulable")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--step-duration", "99999999999d"], "longer than a year"),
        (["--window", "now/400d"], "longer than a year"),
        (["--max-wait", "9999d"], "longer than a year"),
    ],
)
def test_plan_refuses_durations_no_maintenance_has(
    snapshot: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, _, err = run(capsys, "maintenance", "plan", "--snapshot", str(snapshot), "--domains", "r1", *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_dry_run_that_would_stop_exits_1(
    server: ListWatchServer, snapshot: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "maintenance", "plan", "--snapshot", str(snapshot), "--domains", "r1", "-o", "json")
    plan = tmp_path / "plan.json"
    plan.write_text(out)
    config = kubeconfig(tmp_path / "kubeconfig", server.port, TOKEN)
    args = ["maintenance", "drain", str(plan), "--kubeconfig", str(config), "--dry-run"]
    code, out, _ = run(capsys, *args)
    assert code == 0 and "would cordon r1-t0" in out and "would evict pod ml/long-0" in out
    server.delete("", "nodes", None, "r1-t1")
    code, out, _ = run(capsys, *args)
    assert code == 1 and "r1-t1" in out

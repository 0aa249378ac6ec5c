"""``kubectl kilter pending`` shows each pending Workload's expected start and reserved domains
(``tests.gangs.starts_scenario``: rack-a at NOW + 1h on r1, rack-b at NOW + 4h on r1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.kubectl.main import main as kubectl_main
from tests.extenders.conftest import write_snapshot
from tests.gangs import starts_scenario as sc

NOW = "2026-05-28T20:26:40Z"  # starts_scenario.NOW


def pending(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, objects: list[dict[str, Any]], *extra: str
) -> tuple[int, str]:
    snapshot = tmp_path / "cluster.json"
    write_snapshot(snapshot, objects)
    code = kubectl_main(["pending", "-A", "--snapshot", str(snapshot), "--now", NOW, *extra])
    return code, capsys.readouterr().out


def by_name(capsys: pytest.CaptureFixture[str], tmp_path: Path, objects: list[dict[str, Any]]) -> dict[str, Any]:
    code, out = pending(capsys, tmp_path, objects, "-o", "json")
    assert code == 0
    return {p["name"]: p for p in json.loads(out)["pending"]}


def test_each_pending_workload_shows_its_expected_start_and_domains(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    found = by_name(capsys, tmp_path, sc.objects())
    a, b = found["rack-a"], found["rack-b"]
    assert (a["expectedStart"], a["reservedDomains"]) == ("2026-05-28T21:26:40Z", ["r1"])
    assert a["expectedStartReason"] == "r1 is reserved for ml/rack-a from 2026-05-28T21:26:40Z"
    assert (b["expectedStart"], b["reservedDomains"]) == ("2026-05-29T00:26:40Z", ["r1"])
    assert a["reason"] == "TopologyPlacementFailed" and a["position"] == 1  # the existing fields stay
    code, out = pending(capsys, tmp_path, sc.objects(), "-o", "wide")
    assert code == 0
    header, *rows = out.splitlines()
    assert "START" in header.split() and header.split()[-1] == "DOMAINS"
    row = next(r.split() for r in rows if "rack-a" in r.split())
    assert "2026-05-28T21:26:40Z" in row and row[-1] == "r1"


def test_no_start_without_estimates_and_a_bad_annotation_is_named_while_the_others_get_theirs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    found = by_name(capsys, tmp_path, sc.objects(short=None, long=None))
    a = found["rack-a"]
    assert a["expectedStart"] is None and a["reservedDomains"] == []
    assert a["expectedStartReason"].startswith("no start can be promised")
    found = by_name(capsys, tmp_path, sc.objects(a="soon"))
    a, b = found["rack-a"], found["rack-b"]
    assert a["expectedStart"] is None and "kilter.dev/expected-runtime" in a["expectedStartReason"]
    assert (b["expectedStart"], b["reservedDomains"]) == ("2026-05-28T21:26:40Z", ["r1"])


def explain(capsys: pytest.CaptureFixture[str], tmp_path: Path, objects: list[dict[str, Any]], target: str) -> Any:
    snapshot = tmp_path / "cluster.json"
    write_snapshot(snapshot, objects)
    args = ["explain", "-n", "ml", target, "--snapshot", str(snapshot), "--now", NOW]
    assert kubectl_main([*args, "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert kubectl_main(args) == 0
    return data, capsys.readouterr().out


def test_explain_tells_the_reservations_story_in_the_words_pending_uses(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    listed = by_name(capsys, tmp_path, sc.objects())
    a, text_a = explain(capsys, tmp_path, sc.objects(), "workload/rack-a")
    assert (a["start"]["expectedStart"], a["start"]["reservedDomains"]) == ("2026-05-28T21:26:40Z", ["r1"])
    assert a["start"]["reason"] == listed["rack-a"]["expectedStartReason"]
    # It waits for JobSet short (r1 trays 2-17) to end; nothing is reserved on r1 before it.
    assert a["start"]["waitsFor"] == [{"gang": "ml/jobset/short", "gpus": 64, "expectedEnd": "2026-05-28T21:26:40Z"}]
    assert a["start"]["after"] == []
    assert f"Start:     2026-05-28T21:26:40Z: {listed['rack-a']['expectedStartReason']}" in text_a
    assert "when ml/jobset/short ends (64 GPUs, expected 2026-05-28T21:26:40Z)" in text_a
    b, text_b = explain(capsys, tmp_path, sc.objects(), "workload/rack-b")
    assert b["start"]["expectedStart"] == listed["rack-b"]["expectedStart"] == "2026-05-29T00:26:40Z"
    assert b["start"]["after"] == [
        {"owner": "ml/rack-a", "start": "2026-05-28T21:26:40Z", "expectedEnd": "2026-05-29T00:26:40Z"}
    ]
    assert "after ml/rack-a, reserved there from 2026-05-28T21:26:40Z to 2026-05-29T00:26:40Z" in text_b


def test_explain_says_why_a_gang_has_no_start_and_a_running_job_has_no_start_story(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    objects = sc.objects(short=None, long=None)
    listed = by_name(capsys, tmp_path, objects)
    a, text = explain(capsys, tmp_path, objects, "workload/rack-a")
    assert a["start"]["expectedStart"] is None and a["start"]["waitsFor"] == []
    assert a["start"]["reason"] == listed["rack-a"]["expectedStartReason"]
    assert a["start"]["reason"].startswith("no start can be promised")
    assert f"Start:     none: {a['start']['reason']}" in text
    running, _ = explain(capsys, tmp_path, sc.objects(), "workload/jobset-short-1a2b3")
    assert running["quota"]["state"] == "admitted" and running["start"] is None

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

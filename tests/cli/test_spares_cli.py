"""``--spare-nodes-per-domain`` and the annotation at the command line: ``kilter plan`` holds spares out and says
how many, ``kilter simulate`` gives its fleets the spares, a bad count is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.main import main
from kilter.cli.simulate_inputs import load_fleet, with_spares
from tests.cli.test_simulate_cli import FLEET, TRACE
from tests.extenders.conftest import write_snapshot
from tests.topology.builders import CLIQUE, TIER1, node_dict

KEY = "kilter.dev/spare-nodes-per-domain"


def job(pods: int) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "4"}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"parallelism": pods, "template": {"spec": {"containers": [container]}}},
    }


def flavor(count: str) -> dict[str, Any]:
    meta = {"name": "gb200", "annotations": {KEY: count}}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": meta, "spec": {}}


@pytest.fixture
def racks(tmp_path: Path) -> list[dict[str, Any]]:
    return [node_dict(f"{r}-t{t:02d}", labels={CLIQUE: r, TIER1: "leaf"}) for r in ("r1", "r2") for t in range(18)]


def plan(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, objects: list[dict[str, Any]], *flags: str, pods: int = 17
) -> str:
    snapshot, job_file = tmp_path / "cluster.json", tmp_path / "job.json"
    write_snapshot(snapshot, objects)
    job_file.write_text(json.dumps(job(pods)))
    assert main(["plan", "--snapshot", str(snapshot), "--job", str(job_file), *flags]) == 0
    return capsys.readouterr().out


def test_kilter_plan_keeps_the_flags_spares_out_and_prints_them(
    racks: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 18 whole trays fill one rack; with 1 spare a rack (t17 kept) they need two racks: 17 + 1.
    whole = plan(capsys, tmp_path, racks, pods=18)
    assert "in 1 scale-up domain" in whole.splitlines()[0] and "r1-t[00-17]" in whole
    split = plan(capsys, tmp_path, racks, "--spare-nodes-per-domain", "1", pods=18)
    lines = split.splitlines()
    assert "in 2 scale-up domains" in lines[0]
    assert "t17" not in "\n".join(lines[:-1]) and "r1-t[00-16]" in split
    assert lines[-1] == f"spare nodes ({KEY}): GB200-NVL72 2 held, 0 used, 0 short of 2 in 2 domains"


def test_kilter_plan_reads_the_annotation_and_the_largest_setting_wins(
    racks: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = plan(capsys, tmp_path, [*racks, flavor("3")], "--spare-nodes-per-domain", "1")
    assert out.splitlines()[-1] == f"spare nodes ({KEY}): GB200-NVL72 6 held, 0 used, 0 short of 6 in 2 domains"


def test_kilter_plan_says_where_spares_are_lent(
    racks: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lending = flavor("1")
    lending["metadata"]["annotations"]["kilter.dev/spares-for-preemptible"] = "true"
    out = plan(capsys, tmp_path, [*racks, lending])
    held = f"spare nodes ({KEY}): GB200-NVL72 2 held, 0 used, 0 short of 2 in 2 domains"
    assert out.splitlines()[-1] == f"{held}, lent to preemptible pods in 2"


@pytest.mark.parametrize("value", ["-1", "two", "73", "1.5"])
def test_a_bad_flag_is_one_line_and_exit_2(
    value: str, racks: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot, job_file = tmp_path / "cluster.json", tmp_path / "job.json"
    write_snapshot(snapshot, racks)
    job_file.write_text(json.dumps(job(1)))
    argv = ["plan", "--snapshot", str(snapshot), "--job", str(job_file), "--spare-nodes-per-domain", value]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--spare-nodes-per-domain must be a whole number from 0 to" in err


def test_simulated_fleets_get_the_spares_of_the_flag_and_the_queue_file(tmp_path: Path) -> None:
    spec = tmp_path / "fleet.yaml"
    spec.write_text(FLEET)
    make = load_fleet(spec, seed=0)
    assert with_spares(make, [], 0) is make  # nothing asked: the fleets as they were
    fleet = with_spares(make, [flavor("3")], 1)()
    assert fleet.spare_nodes is not None
    kept = {fleet.domain_ids[d]: int(n) for d, n in enumerate(fleet.spare_nodes)}
    multi = {d for d, p in zip(fleet.domain_ids, fleet.bitmap.domain_platforms, strict=True) if p == 0}
    assert {kept[d] for d in multi} == {3} and {n for d, n in kept.items() if d not in multi} == {0}


def test_simulate_runs_with_spares_and_refuses_a_bad_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet, trace = tmp_path / "fleet.yaml", tmp_path / "trace.csv"
    fleet.write_text(FLEET)
    trace.write_text(TRACE)
    args = ["simulate", "--fleet", str(fleet), "--trace", str(trace), "--policy", "kilter", "-o", "json"]
    assert main([*args, "--spare-nodes-per-domain", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["policies"]["kilter"]["completed"] == 60
    assert main([*args, "--spare-nodes-per-domain", "x"]) == 2
    assert "--spare-nodes-per-domain must be a whole number" in capsys.readouterr().err

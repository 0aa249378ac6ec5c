"""``kilter demo``: kilter over a real HTTP extender against the baselines, and the same answers as in-process."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kilter.cli import demo_compare
from kilter.cli.demo_scheduler import ExtenderPlacement, ExtenderServer
from kilter.cli.main import main
from kilter.cli.sources import DEMO_QUEUES
from kilter.sim import fleetspec, run, synthetic
from kilter.sim.engine import SimConfig
from kilter.sim.placement import PlacementPolicy
from kilter.sim.simple import KilterPlacement
from kilter.state import snapshot


def test_demo_compares_kilter_over_http_with_kueue_tas_and_slurm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "demo.png"
    assert main(["demo", "--jobs", "150", "--plot", str(png), "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert list(report["policies"]) == ["kilter", "kueue-tas", "slurm"]
    assert all(m["jobs"] == 150 for m in report["policies"].values())
    assert report["policies"]["kilter"]["extenderCalls"] >= 3 * 150  # filter, prioritize and bind per pod
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report["plot"] == str(png)
    assert len(set(report["queueOf"].values())) >= 3  # the tenants are dealt to the demo's ClusterQueues
    versus = report["versus"]
    jct = {name: m["meanJctSeconds"] for name, m in report["policies"].items()}
    best = min(("kueue-tas", "slurm"), key=lambda n: jct[n])
    assert versus["meanJctSeconds"]["best"] == best
    assert versus["meanJctSeconds"]["ratio"] == pytest.approx(jct["kilter"] / jct[best], abs=1e-3)
    assert versus["summary"].startswith("kilter / best other policy: mean JCT ")


def test_demo_table_names_the_policies_and_says_where_kilter_trails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--jobs", "60", "--plot", str(tmp_path / "d.png")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    first = [line.split()[0] for line in lines[3:6]]
    assert first == list(demo_compare.DEMO_POLICIES)
    at = lines.index("By job class (1-DOMAIN: jobs one scale-up domain can hold; MULTI-DOMAIN: the rest):")
    assert [line.split()[0] for line in lines[at + 2 : at + 5]] == list(demo_compare.DEMO_POLICIES)
    verdict = next(line for line in lines if line.startswith("kilter / best other policy: "))
    assert verdict.endswith("ahead or level on all three") or ": behind on " in verdict


def test_kilter_over_http_places_every_gang_as_the_planner_does_in_process(tmp_path: Path) -> None:
    # GPUs x6: a 1-GPU Philly job becomes a 4-GPU and a 2-GPU pod, so gangs have pods of two shapes.
    jobs = synthetic.generate("philly", jobs=600, seed=3, gpu_scale=6)
    objects = demo_compare.demo_objects()
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    queue_objects = snapshot.load_documents(DEMO_QUEUES)
    outcomes = []
    with ExtenderServer(path) as server:
        policies: list[PlacementPolicy] = [KilterPlacement(), ExtenderPlacement(server)]
        for policy in policies:
            r = run.simulate(
                lambda: fleetspec.fleet_from_objects(objects),
                jobs,
                policy,
                queue_objects=queue_objects,
                config=SimConfig(fair=True),
            )
            outcomes.append(r.simulation.outcome)
            if isinstance(policy, ExtenderPlacement):
                policy.close()
        # Every pod the extender bound has left kilter's state again once its job ended.
        assert not [p for p in server.store.state().pods if p.metadata.namespace == "demo"]
    direct, http = outcomes
    assert np.array_equal(direct.start, http.start, equal_nan=True)
    assert np.array_equal(direct.domains, http.domains)
    assert int((direct.domains > 0).sum()) == 600


def test_a_released_gang_can_be_restored_where_it_was_bound(tmp_path: Path) -> None:
    from kilter.sim.gangs import gang_for

    objects = demo_compare.demo_objects()
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    fleet = fleetspec.fleet_from_objects(objects)
    with ExtenderServer(path) as server:
        policy = ExtenderPlacement(server)
        try:
            nodes = policy.place(fleet, gang_for(7, 32, fleet.platforms[0], 0, "preferred"))
            assert nodes is not None and len(nodes) == 8

            def bound() -> dict[str, str]:
                pods = server.store.state().pods
                return {p.metadata.name: p.spec.node_name for p in pods if p.metadata.namespace == "demo"}

            where = {f"job-7-{i}": fleet.node_names[n] for i, n in enumerate(nodes.tolist())}
            assert bound() == where
            policy.release(7)
            assert bound() == {}
            policy.restore(7)  # a what-if eviction undone: the pods are back on their nodes
            assert bound() == where
            policy.release(7)
            assert bound() == {}
        finally:
            policy.close()

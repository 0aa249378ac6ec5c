"""Volcano's predicate over loopback with spare nodes: a PodGroup's plan leaves each rack's spares alone.

The scenario's fleet (``tests.extenders.conftest.cluster_objects``): rack r1
with ``r1-t05`` cordoned (17 usable trays), rack r2 with ``r2-t00`` busy and
``r2-t01`` half busy. ``--spare-nodes-per-domain 2`` keeps the top two idle
trays of each rack: t16 and t17. A gang of 16 whole-tray tasks fits r1 alone
with the spares (17 trays) but not without them (15): it goes 15 + 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.extenders.conftest import pod_json
from tests.extenders.volcano import payloads as vp
from tests.extenders.volcano.conftest import Volcano, gpu_job, open_session, serve, task_of
from tests.topology.builders import CLIQUE

NODES = [f"{rack}-t{t:02d}" for rack in ("r1", "r2") for t in range(18)]
SPARES = {"r1-t16", "r1-t17", "r2-t16", "r2-t17"}


@pytest.fixture(params=["snapshot", "live"])
def volcano(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Volcano]:
    yield from serve(tmp_path, [], mode=request.param, spare_nodes_per_domain=2)


def test_the_podgroups_tasks_pass_no_spare_node(volcano: Volcano) -> None:
    gang = gpu_job("big", 16, 4)
    open_session(volcano, [gang])
    passing = set()
    for name in NODES:
        node = vp.node_info(name, gpus=4, labels={CLIQUE: name.split("-")[0]})
        status, body = volcano.post("predicate", vp.predicate_args(task_of(gang), node))
        assert status == 200
        if body["code"] == vp.SUCCESS:
            passing.add(name)
    assert len(passing) == 16 and not passing & SPARES
    assert {n.split("-")[0] for n in passing} == {"r1", "r2"}  # 15 + 1: r1 alone would need a spare


@pytest.mark.parametrize("lends", [True, False], ids=["--spares-for-preemptible", "spares kept"])
def test_a_lone_task_passes_a_spare_only_where_spares_are_lent_to_it(lends: bool, tmp_path: Path) -> None:
    # A gang of priority 100 runs in r1; the task's -10 is below it, so r1's lent spares are the task's to use.
    running = pod_json("train-0", 4, labels={"kilter.dev/gang": "train", "kilter.dev/gang-size": "1"}, node="r1-t00")
    running["spec"]["priority"] = 100
    for v in serve(tmp_path, [running], spare_nodes_per_domain=2, spares_for_preemptible=lends):
        lone = gpu_job("scavenge", 1, 4, priority=-10)
        open_session(v, [lone])
        node = vp.node_info("r1-t16", gpus=4, labels={CLIQUE: "r1"})
        status, body = v.post("predicate", vp.predicate_args(task_of(lone), node))
        assert status == 200
        assert (body["code"] == vp.SUCCESS) is lends, body
        if not lends:
            assert "kept spare for repairs" in body["status"]

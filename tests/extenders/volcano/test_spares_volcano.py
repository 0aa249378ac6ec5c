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

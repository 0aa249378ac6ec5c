"""A gang planned whole ranks its plan's nodes strictly first on Volcano's prioritize, as on the extender's.

Five GB200 NVL72 racks with 18, 5, 4, 12 and 9 free trays, and a gang of
four whole-tray pods named by kilter's gang labels, each pod under a PodGroup
of its own (what Volcano makes for a pod that names none). Best-fit scores
r01 (5 free) and r02 (4 free) alike, since each is busier than a sixth of
its trays by the same bucket; the gang fits r02 exactly, where the extender
plans it, and Volcano's prioritize must put r02's trays strictly on top.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.serve import build_app
from tests.extenders.conftest import Served, _Server, pod_json, serve_config, write_snapshot
from tests.extenders.volcano import payloads as vp
from tests.extenders.volcano.conftest import Volcano, open_session, quota_objects
from tests.topology.builders import CLIQUE, node_dict

FREE = {"r00": 18, "r01": 5, "r02": 4, "r03": 12, "r04": 9}
USED = {f"{rack}-t{t:02d}" for rack, free in FREE.items() for t in range(free, 18)}
TRAYS = sorted(f"{rack}-t{t:02d}" for rack in FREE for t in range(18))
GANG = {"kilter.dev/gang": "train", "kilter.dev/gang-size": "4"}


def objects() -> list[dict[str, Any]]:
    nodes = [node_dict(n, labels={CLIQUE: n.split("-")[0]}) for n in TRAYS]
    return [*nodes, *(pod_json(f"busy-{n}", 4, node=n) for n in sorted(USED)), *quota_objects()]


@pytest.fixture
def volcano(tmp_path: Path) -> Iterator[Volcano]:
    snapshot = tmp_path / "snapshot.json"
    write_snapshot(snapshot, objects())
    app, _ = build_app(serve_config(snapshot))
    with _Server(app, None) as port:
        yield Volcano(app, port)


def labelled_jobs() -> list[dict[str, Any]]:
    """The gang's four pods, each in a PodGroup of its own of one member (Volcano's default for a bare pod)."""
    jobs = []
    for i in range(4):
        group = f"podgroup-uid-train-{i}"
        pod = vp.pod("ml", f"train-{i}", f"uid-train-{i}", gpus=4, group=group, labels=GANG)
        jobs.append(vp.job_info("ml", group, queue="ml-training", min_available=1, tasks=[vp.task_info(pod)]))
    return jobs


def free_trays() -> list[dict[str, Any]]:
    return [vp.node_info(n, gpus=4, labels={CLIQUE: n.split("-")[0]}) for n in TRAYS if n not in USED]


def top(scores: dict[str, int]) -> set[str]:
    best = max(scores.values())
    return {n for n, s in scores.items() if s == best}


def extender_plan(tmp_path: Path) -> set[str]:
    """The nodes kube-scheduler's extender prioritize puts on top for the gang's first pod."""
    snapshot = tmp_path / "extender.json"
    pods = [pod_json(f"train-{i}", 4, labels=GANG) for i in range(4)]
    write_snapshot(snapshot, [*objects(), *pods])
    app, store = build_app(serve_config(snapshot))
    free = [n for n in TRAYS if n not in USED]
    with _Server(app, None) as port:
        status, answer = Served(app, store, snapshot, port).post(
            "prioritize", {"Pod": pods[0], "Nodes": None, "NodeNames": free}
        )
    assert status == 200
    return top({h["Host"]: h["Score"] for h in answer})


def test_volcano_prioritize_puts_the_planned_rack_strictly_first_as_the_extender_does(
    volcano: Volcano, tmp_path: Path
) -> None:
    jobs = labelled_jobs()
    open_session(volcano, jobs)
    first = next(iter(jobs[0]["Tasks"].values()))
    status, body = volcano.post("prioritize", vp.prioritize_args(first, free_trays()))
    assert status == 200 and body["errorMessage"] == ""
    best = top(body["nodeScore"])
    assert best == {f"r02-t{t:02d}" for t in range(4)}  # the rack the gang fits exactly, and nothing else on top
    assert best == extender_plan(tmp_path)

"""A snapshot with an object kilter cannot read, or a file that does not parse, over a real ``kilter serve``.

One bad object is left out and named; a bad file keeps the state loaded
before it. Either way the file is read again on its next change, ``/readyz``
still answers 200 and lists what is wrong, and ``/metrics`` counts it.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.extenders.conftest import (
    Served,
    cluster_objects,
    names_args,
    pod_json,
    serve_snapshot,
)


def bad_pod() -> dict[str, Any]:
    pod = pod_json("bad", 1)
    pod["spec"]["containers"] = "oops"
    return pod


def bad_cluster_queue() -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": "oops"}


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Served]:
    with serve_snapshot(tmp_path, cluster_objects()) as served:
        yield served


def readyz(served: Served) -> tuple[int, list[str]]:
    status, body, _ = served.call("GET", "/readyz")
    return status, body.decode().splitlines()


def metric(served: Served, name: str) -> float:
    status, text, _ = served.call("GET", "/metrics")
    assert status == 200
    found = re.search(rf"^{name} (\S+)$", text.decode(), re.MULTILINE)
    assert found is not None, name
    return float(found.group(1))


def until(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not done():
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.05)


def passes_r1_t00(served: Served) -> bool:
    status, result = served.post("filter", names_args(pod_json("probe", 4), ["r1-t00"]))
    assert status == 200 and result["Error"] == ""
    return bool(result["NodeNames"] == ["r1-t00"])


def test_a_reload_with_an_unreadable_pod_loads_the_rest_and_later_reloads_still_happen(fleet: Served) -> None:
    assert readyz(fleet) == (200, ["ok"])
    fleet.replace([*cluster_objects(), bad_pod(), pod_json("filler", 4, node="r1-t00")])
    until("the bad pod named", lambda: any("Pod ml/bad" in line for line in readyz(fleet)[1]))
    assert not passes_r1_t00(fleet)  # the rest of the file did load: the filler pod holds r1-t00
    status, lines = readyz(fleet)
    assert status == 200 and lines[0] == "ok"
    assert len(lines) == 2 and "Pod ml/bad" in lines[1] and "spec.containers" in lines[1]
    assert metric(fleet, "kilter_state_objects_unreadable") == 1
    fleet.replace(cluster_objects())
    until("the next change loaded", lambda: passes_r1_t00(fleet))
    assert readyz(fleet) == (200, ["ok"])
    assert metric(fleet, "kilter_state_objects_unreadable") == 0 and metric(fleet, "kilter_state_reload_ok") == 1


def test_a_file_that_does_not_parse_keeps_the_last_state_and_says_so_until_a_good_one_comes(fleet: Served) -> None:
    assert fleet.snapshot is not None
    fleet.snapshot.write_text('{"apiVersion": "v1", "kind": "List", "items": [')
    until("the failed reload", lambda: metric(fleet, "kilter_state_reload_failures_total") >= 1)
    assert metric(fleet, "kilter_state_reload_ok") == 0
    status, lines = readyz(fleet)
    assert status == 200 and lines[0] == "ok" and len(lines) == 2 and "not reloaded" in lines[1]
    assert passes_r1_t00(fleet)  # the state loaded before still answers
    fleet.replace([*cluster_objects(), pod_json("filler", 4, node="r1-t00")])
    until("the good file loaded", lambda: not passes_r1_t00(fleet))
    assert metric(fleet, "kilter_state_reload_ok") == 1 and metric(fleet, "kilter_state_reload_failures_total") >= 1
    assert readyz(fleet) == (200, ["ok"])


def test_a_snapshot_with_an_unreadable_pod_at_startup_serves_the_rest(tmp_path: Path) -> None:
    with serve_snapshot(tmp_path, [*cluster_objects(), bad_pod()]) as served:
        assert passes_r1_t00(served)
        status, lines = readyz(served)
        assert status == 200 and len(lines) == 2 and "Pod ml/bad" in lines[1]
        assert metric(served, "kilter_state_objects_unreadable") == 1


def test_a_cluster_queue_kilter_cannot_read_is_left_out_and_filters_still_answer(tmp_path: Path) -> None:
    with serve_snapshot(tmp_path, [*cluster_objects(), bad_cluster_queue()]) as served:
        assert passes_r1_t00(served)
        status, body, _ = served.call("POST", "/volcano/queueOverused", b'{"queue": {"Name": "cq"}}')
        assert status == 200 and json.loads(body) == {"overused": False}
        status, lines = readyz(served)
        assert status == 200 and len(lines) == 2 and "ClusterQueue cq" in lines[1]
        assert metric(served, "kilter_state_objects_unreadable") == 1


def test_a_snapshot_file_that_vanishes_is_reported_and_read_again_when_it_is_back(fleet: Served) -> None:
    assert fleet.snapshot is not None
    fleet.snapshot.unlink()
    until("the file gone", lambda: metric(fleet, "kilter_state_reload_ok") == 0)
    status, lines = readyz(fleet)
    assert status == 200 and len(lines) == 2 and "the file is gone" in lines[1]
    assert passes_r1_t00(fleet)  # the state loaded before still answers
    fleet.replace([*cluster_objects(), pod_json("filler", 4, node="r1-t00")])
    until("the file back", lambda: not passes_r1_t00(fleet))
    assert metric(fleet, "kilter_state_reload_ok") == 1 and metric(fleet, "kilter_state_reload_failures_total") >= 1
    assert readyz(fleet) == (200, ["ok"])


def _alias_bomb() -> str:
    """2 KB of YAML that stands for 10⁹ objects: a top-level list of lists each holding ten of the one before."""
    lines = ["- &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"- &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 10)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("hostile", ["alias bomb", "FIFO"])
def test_a_hostile_snapshot_is_refused_in_one_line_and_the_next_good_file_applies(fleet: Served, hostile: str) -> None:
    assert fleet.snapshot is not None
    if hostile == "FIFO":
        fifo = fleet.snapshot.with_name("fifo")
        os.mkfifo(fifo)
        os.replace(fifo, fleet.snapshot)
        words = "is a FIFO"
    else:
        fleet.snapshot.write_text(_alias_bomb())
        words = "owes too much to YAML aliases"
    until("the refusal", lambda: metric(fleet, "kilter_state_reload_ok") == 0)
    status, lines = readyz(fleet)
    assert status == 200 and len(lines) == 2 and words in lines[1] and str(fleet.snapshot) in lines[1], lines
    assert passes_r1_t00(fleet)  # the state loaded before still answers
    fleet.snapshot.unlink()  # a FIFO cannot be written without a reader; a ConfigMap swap renames anyway
    fleet.replace([*cluster_objects(), pod_json("filler", 4, node="r1-t00")])
    until("the good file loaded", lambda: not passes_r1_t00(fleet))
    assert metric(fleet, "kilter_state_reload_ok") == 1
    assert readyz(fleet) == (200, ["ok"])

"""A Node whose GPU count is no count is left out of the fleet and named; the other nodes answer as before.

Over a real ``kilter serve``: before, one such Node made every filter answer
``Error: malformed quantity …``.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from kilter.topology.fleet import build_fleet
from tests.extenders.conftest import (
    Served,
    cluster_objects,
    names_args,
    pod_json,
    serve_snapshot,
)
from tests.topology.builders import CLIQUE, node, pod, rack

BAD_COUNTS = ["abc", "-4", "0.5", "1e10000000"]


def with_gpus(objects: list[dict[str, Any]], counts: dict[str, str]) -> list[dict[str, Any]]:
    """``objects`` with these nodes' allocatable ``nvidia.com/gpu`` replaced."""
    for obj in objects:
        name = obj["metadata"]["name"]
        if obj["kind"] == "Node" and name in counts:
            obj["status"]["allocatable"]["nvidia.com/gpu"] = counts[name]
    return objects


def refused(result: dict[str, Any]) -> dict[str, str]:
    """The nodes a filter answer refuses, with why (a node kilter does not know is unresolvable for the pod)."""
    return {**result["FailedNodes"], **result["FailedAndUnresolvableNodes"]}


def unreadable_metric(served: Served) -> float:
    _, text, _ = served.call("GET", "/metrics")
    found = re.search(r"^kilter_state_objects_unreadable (\S+)$", text.decode(), re.MULTILINE)
    assert found is not None
    return float(found.group(1))


@pytest.mark.parametrize("count", [pytest.param(c, id=f"gpu count {c[:12]}") for c in BAD_COUNTS])
def test_a_node_whose_gpu_count_is_no_count_is_left_out_and_named(count: str) -> None:
    nodes = [node("good", labels={CLIQUE: "r1"}), node("bad", labels={CLIQUE: "r1"})]
    nodes[1].status.allocatable["nvidia.com/gpu"] = count
    fleet = build_fleet(nodes)
    assert fleet.node_names == ["good"]
    assert list(fleet.unreadable_nodes) == ["bad"] and fleet.unreadable_nodes["bad"] in fleet.warnings


def test_a_filter_passes_a_good_node_while_nodes_with_bad_gpu_counts_are_in_the_snapshot(tmp_path: Path) -> None:
    objects = with_gpus(cluster_objects(), {"r1-t03": "abc", "r1-t04": "-4"})
    with serve_snapshot(tmp_path, objects) as served:
        status, result = served.post("filter", names_args(pod_json("p", 4), ["r1-t00", "r1-t03", "r1-t04"]))
        assert status == 200 and result["Error"] == ""
        assert result["NodeNames"] == ["r1-t00"] and set(refused(result)) == {"r1-t03", "r1-t04"}
        status, body, _ = served.call("GET", "/readyz")
        lines = body.decode().splitlines()
        assert status == 200 and lines[0] == "ok" and len(lines) == 3
        assert "node r1-t03" in lines[1] and "node r1-t04" in lines[2]
        assert unreadable_metric(served) == 2


def test_a_reload_that_brings_a_bad_gpu_count_keeps_the_other_nodes_answering(tmp_path: Path) -> None:
    with serve_snapshot(tmp_path, cluster_objects()) as served:
        served.replace(with_gpus(cluster_objects(), {"r1-t03": "abc"}))
        deadline = time.monotonic() + 10
        while True:
            status, result = served.post("filter", names_args(pod_json("p", 4), ["r1-t00", "r1-t03"]))
            assert status == 200 and result["Error"] == ""
            if result["NodeNames"] == ["r1-t00"] and refused(result):
                break  # the whole new file is loaded (a file caught half-written refuses r1-t00 too)
            assert time.monotonic() < deadline, "the snapshot was not reloaded"
            time.sleep(0.05)
        assert result["NodeNames"] == ["r1-t00"] and list(refused(result)) == ["r1-t03"]
        assert unreadable_metric(served) == 1


def test_a_bound_pod_whose_gpu_request_is_no_count_fills_its_node_and_is_named() -> None:
    bad = pod("bad", "r1-t01", 1)
    bad.spec.containers[0].resources.limits["nvidia.com/gpu"] = "abc"
    fleet = build_fleet(rack("r1", trays=3), [bad, pod("ok", "r1-t02", 1)])
    free = fleet.bitmap.node_free_gpus
    assert [free(fleet.node_index[n]) for n in ("r1-t00", "r1-t01", "r1-t02")] == [4, 0, 3]
    assert any(w.startswith("pod default/bad:") and "counted as full" in w for w in fleet.warnings)

"""Two Nodes of one name in a snapshot: kilter keeps the same copy whatever the order, and says so.

The newer copy (higher resourceVersion) wins; without comparable versions,
the copy whose JSON sorts first. Over a real ``kilter serve``: a filter's
answer about the node must not depend on which copy the file lists last.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kilter.state.store import ClusterStore
from tests.extenders.conftest import (
    cluster_objects,
    names_args,
    pod_json,
    serve_snapshot,
)
from tests.topology.builders import CLIQUE, TIER1, node_dict

LABELS = {CLIQUE: "r1", TIER1: "leaf-a"}


def copies(*, versions: tuple[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """r1-t00 twice: cordoned, then schedulable, with these resourceVersions."""
    cordoned = node_dict("r1-t00", labels=LABELS, cordoned=True)
    ready = node_dict("r1-t00", labels=LABELS)
    for copy, version in zip((cordoned, ready), versions, strict=True):
        if version:
            copy["metadata"]["resourceVersion"] = version
    return cordoned, ready


def others() -> list[dict[str, Any]]:
    return [o for o in cluster_objects() if o["metadata"]["name"] != "r1-t00"]


def passes(tmp_path: Path, objects: list[dict[str, Any]]) -> tuple[bool, list[str]]:
    """Whether a 4-GPU pod passes r1-t00 over HTTP, and /readyz's lines."""
    with serve_snapshot(tmp_path, objects) as served:
        status, result = served.post("filter", names_args(pod_json("p", 4), ["r1-t00"]))
        assert status == 200 and result["Error"] == ""
        _, body, _ = served.call("GET", "/readyz")
        return result["NodeNames"] == ["r1-t00"], body.decode().splitlines()


@pytest.mark.parametrize(
    ("versions", "kept_ready"),
    [
        pytest.param(("10", "12"), True, id="the schedulable copy is newer (12 > 10)"),
        pytest.param(("12", "10"), False, id="the cordoned copy is newer (12 > 10)"),
        # Sorted JSON: the schedulable copy's "spec":{} sorts before the cordoned one's "spec":{"taints":...}.
        pytest.param(("", ""), True, id="no versions: the copy first by content"),
    ],
)
def test_two_copies_of_a_node_give_the_same_answer_in_either_order(
    tmp_path: Path, versions: tuple[str, str], kept_ready: bool
) -> None:
    a, b = copies(versions=versions)
    first, first_lines = passes(tmp_path / "ab", [*others(), a, b])
    second, second_lines = passes(tmp_path / "ba", [*others(), b, a])
    assert first == second == kept_ready
    assert first_lines == second_lines
    assert first_lines[0] == "ok" and len(first_lines) == 2 and "Node r1-t00 appears more than once" in first_lines[1]


def test_the_copy_kept_is_the_same_whatever_the_order() -> None:
    a, b = copies(versions=("", ""))
    kept = []
    for order in ([a, b], [b, a]):
        store = ClusterStore()
        store.replace(order)
        kept.append(store.node_named("r1-t00"))
    assert kept[0] == kept[1] is not None
    store = ClusterStore()
    store.replace([a])
    assert store.problems() == []

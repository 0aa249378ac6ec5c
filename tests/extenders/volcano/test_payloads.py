"""Structural self-checks of the Volcano extender payload builders."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.extenders.volcano import payloads as vp

VERSIONS: tuple[vp.VolcanoVersion, ...] = ("v1.13", "v1.14", "v1.15", "head")


def _cluster(version: vp.VolcanoVersion) -> dict[str, Any]:
    pending = vp.task_info(vp.pod("ml", "w-0", "uid-w0", gpus=8, group="pg"), version=version)
    running = vp.task_info(vp.pod("ml", "w-1", "uid-w1", gpus=8, group="pg", node_name="n1"), version=version)
    job = vp.job_info(
        "ml",
        "pg",
        queue="team-a",
        min_available=2,
        tasks=[pending, running],
        network_topology={"mode": "hard", "highestTierAllowed": 1},
        version=version,
    )
    n1 = vp.node_info("n1", gpus=8, tasks=[running], version=version)
    n2 = vp.node_info("n2", gpus=8, used_gpus=2, labels={"volcano.sh/revocable-zone": "rz1"}, version=version)
    queue = vp.queue_info("team-a", version=version)
    return {"pending": pending, "running": running, "job": job, "nodes": [n1, n2], "queue": queue}


def test_wrapper_keys_are_lowercase_except_session_open() -> None:
    c = _cluster("head")
    t, n, j, q = c["pending"], c["nodes"][0], c["job"], c["queue"]
    assert list(vp.predicate_args(t, n)) == ["task", "node"]
    assert list(vp.prioritize_args(t, c["nodes"])) == ["task", "nodes"]
    assert list(vp.evict_args(t, [c["running"]])) == ["evictor", "evictees"]
    assert list(vp.job_args(j)) == ["job"]
    assert list(vp.queue_args(q)) == ["queue"]
    assert list(vp.task_args(t)) == ["task"]
    body = vp.session_open_args([j], c["nodes"], [q])
    assert list(body) == ["Jobs", "Nodes", "Queues", "NamespaceInfo", "RevocableNodes", "NodeList"]
    assert list(body["Jobs"]) == ["ml/pg"] and list(body["Queues"]) == ["team-a"]
    assert list(body["RevocableNodes"]) == ["n2"] and body["NodeList"] is None


@pytest.mark.parametrize("version", VERSIONS)
def test_task_status_is_an_int_bitmask_and_gpus_are_milli(version: vp.VolcanoVersion) -> None:
    c = _cluster(version)
    assert c["pending"]["Status"] == vp.PENDING == 1 and c["running"]["Status"] == vp.RUNNING == 32
    req = c["pending"]["Resreq"]
    assert req == {
        "MilliCPU": 16000,
        "Memory": 128 * 2**30,
        "ScalarResources": {"nvidia.com/gpu": 8000, "pods": 1},
        "MaxTaskNum": 0,
    }
    assert all(type(v) is int for v in req["ScalarResources"].values())  # Go prints 8000, not 8000.0
    assert list(c["job"]["TaskStatusIndex"]) == ["1", "32"]
    n1, n2 = c["nodes"]
    assert list(n1["Tasks"]) == ["ml/w-1"] and n1["Tasks"]["ml/w-1"]["NodeName"] == "n1"
    assert n2["Used"]["ScalarResources"]["nvidia.com/gpu"] == 2000
    assert n2["Idle"]["ScalarResources"]["nvidia.com/gpu"] == 6000
    assert 5_000 <= len(vp.to_go_json(n1["Node"])) <= 10_000


@pytest.mark.parametrize("version", VERSIONS)
def test_bodies_round_trip_as_compact_go_json(version: vp.VolcanoVersion) -> None:
    c = _cluster(version)
    for body in (
        vp.session_open_args([c["job"]], c["nodes"], [c["queue"]]),
        vp.prioritize_args(c["pending"], c["nodes"]),
        vp.evict_args(c["pending"], [c["running"]]),
    ):
        raw = vp.to_go_json(body)
        assert json.loads(raw) == body
        assert raw == json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()  # no <>& in these


def test_versions_differ_where_volcano_does() -> None:
    old, new = _cluster("v1.13"), _cluster("head")
    pg13, pg = old["job"]["PodGroup"], new["job"]["PodGroup"]
    assert pg13["name"] == "pg" and pg13["Spec"]["MinMember"] == 2 and pg13["Status"]["Phase"] == "Inqueue"
    assert pg["metadata"]["name"] == "pg" and pg["spec"]["minMember"] == 2 and pg["status"]["phase"] == "Inqueue"
    assert pg13["Version"] == pg["Version"] == "v1beta1"
    assert "Spec" in old["queue"]["Queue"] and "spec" in new["queue"]["Queue"]
    assert "NetworkTopology" not in old["job"] and new["job"]["NetworkTopology"] == {
        "mode": "hard",
        "highestTierAllowed": 1,
    }
    assert "DRAResreq" not in old["pending"] and new["pending"]["PodAnnotations"] == {
        "scheduling.k8s.io/group-name": "pg"
    }
    assert old["nodes"][0]["Others"] == {"GpuShare": None, "hamivgpu": None} and new["nodes"][0]["Others"] == {}
    with pytest.raises(ValueError, match="not built with"):
        vp.job_info("ml", "pg", queue="q", min_available=1, tasks=[old["pending"]], version="head")


def test_go_float_and_html_escaping() -> None:
    assert vp.resource(4000.0, 0.5, {"nvidia.com/gpu": 1000.0}) == {
        "MilliCPU": 4000,
        "Memory": 0.5,
        "ScalarResources": {"nvidia.com/gpu": 1000},
        "MaxTaskNum": 0,
    }
    assert vp.resource(0, 0)["ScalarResources"] is None
    assert vp.to_go_json({"status": "a<b&c"}) == b'{"status":"a\\u003cb\\u0026c"}'
    assert [k[:2] for k in vp.FACTS][:7] == ["1_", "2_", "3_", "4_", "5_", "6_", "7_"]

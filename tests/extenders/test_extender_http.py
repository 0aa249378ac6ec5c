"""The kube-scheduler extender over real HTTP on 127.0.0.1, with bodies shaped as kube-scheduler sends them."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.extenders.conftest import (
    Served,
    cluster_objects,
    names_args,
    pod_json,
)
from tests.topology.builders import CLIQUE, TIER1, node_dict

FILTER_KEYS = ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"]
RACK1 = [f"r1-t{t:02d}" for t in range(18)]
RACK2 = [f"r2-t{t:02d}" for t in range(18)]


def test_filter_in_names_mode_sorts_nodes_into_pass_full_and_never(served: Served) -> None:
    names = [*RACK1[:6], "r2-t00", "r2-t01", "mi-1", "cpu-1", "nowhere-7"]
    status, result = served.post("filter", names_args(pod_json("p", 4), names))
    assert status == 200
    assert list(result) == FILTER_KEYS  # PascalCase, every key present
    assert result["Nodes"] is None and result["Error"] == ""
    assert result["NodeNames"] == ["r1-t00", "r1-t01", "r1-t02", "r1-t03", "r1-t04"]
    # Full now, but preemption could free it: FailedNodes, so the scheduler still tries preemption there.
    assert set(result["FailedNodes"]) == {"r2-t00", "r2-t01"}
    assert result["FailedNodes"]["r2-t01"] == "2 of 4 nvidia.com/gpu free; the pod needs 4"
    never = result["FailedAndUnresolvableNodes"]
    assert set(never) == {"r1-t05", "mi-1", "cpu-1", "nowhere-7"}
    assert "cordoned" in never["r1-t05"] and "not nvidia.com/gpu" in never["mi-1"]
    assert "not a GPU node" in never["nowhere-7"]


def test_node_selectors_exclude_nodes_per_pod_shape(served: Served) -> None:
    leaf_b = pod_json("b1", 4)
    leaf_b["spec"]["nodeSelector"] = {"fabric.topograph.run/tier-1": "leaf-b"}
    _, result = served.post("filter", names_args(leaf_b, ["r1-t00", "r2-t02"]))
    assert result["NodeNames"] == []
    assert all("nodeSelector" in why for why in result["FailedAndUnresolvableNodes"].values())
    # A pod with another selector gets its own mask, not the one cached for the first shape.
    leaf_a = pod_json("a1", 4)
    leaf_a["spec"]["nodeSelector"] = {"fabric.topograph.run/tier-1": "leaf-a"}
    _, result = served.post("filter", names_args(leaf_a, ["r1-t00", "r2-t02"]))
    assert result["NodeNames"] == ["r1-t00", "r2-t02"]
    _, result = served.post(
        "filter", names_args({**leaf_b, "metadata": {**leaf_b["metadata"], "name": "b2"}}, ["r1-t00"])
    )
    assert result["NodeNames"] == []


def test_a_smaller_pod_fits_the_half_used_tray(served: Served) -> None:
    _, result = served.post("filter", names_args(pod_json("p", 2), ["r2-t00", "r2-t01"]))
    assert result["NodeNames"] == ["r2-t01"] and list(result["FailedNodes"]) == ["r2-t00"]


def test_filter_in_nodes_mode_answers_with_the_schedulers_own_node_objects(served: Served) -> None:
    nodes = [node_dict(n, labels={CLIQUE: "r1", TIER1: "leaf-a"}) for n in RACK1[3:7]]
    for n in nodes:
        n["metadata"]["creationTimestamp"] = None
        n["metadata"]["managedFields"] = [{"manager": "kubelet", "operation": "Update", "time": None}]
    body = {"Pod": pod_json("p", 4), "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}
    status, result = served.post("filter", body)
    assert status == 200 and result["NodeNames"] is None
    assert result["Nodes"]["items"] == [n for n in nodes if n["metadata"]["name"] != "r1-t05"]
    assert list(result["FailedAndUnresolvableNodes"]) == ["r1-t05"]


def test_nodes_as_go_writes_them_metadata_first_and_an_escaped_name(served: Served) -> None:
    nodes = []
    for name in ("r1-t01", "r1-t05", "r1-t02"):
        n = node_dict(name, labels={CLIQUE: "r1", TIER1: "leaf-a"})
        nodes.append({"metadata": n["metadata"], "spec": n["spec"], "status": n["status"]})
    args = {"Pod": pod_json("p", 4), "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}
    body = json.dumps(args, separators=(",", ":"))  # compact, as Go writes it
    assert body.count('{"metadata":{"name":"r1-t') == 3
    body = body.replace('"name":"r1-t02"', '"name":"r1-t\\u0030\\u0032"')  # JSON escapes: still r1-t02
    status, data, _ = served.call("POST", "/scheduler/filter", body.encode())
    result = json.loads(data)
    assert status == 200 and [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["r1-t01", "r1-t02"]
    assert list(result["FailedAndUnresolvableNodes"]) == ["r1-t05"]


def test_prioritize_answers_a_bare_array_of_integer_scores_in_request_order(served: Served) -> None:
    names = ["r2-t01", "r1-t00", "r2-t00", "cpu-1", "r1-t01"]
    status, result = served.post("prioritize", names_args(pod_json("p", 2), names))
    assert status == 200 and isinstance(result, list)
    assert [h["Host"] for h in result] == names
    assert all(list(h) == ["Host", "Score"] and type(h["Score"]) is int and 0 <= h["Score"] <= 10 for h in result)
    scores = {h["Host"]: h["Score"] for h in result}
    assert scores["r2-t00"] == 0 and scores["cpu-1"] == 0  # full; unknown
    # Packing: the half-used tray in the busier rack beats an idle tray of an idle rack.
    assert scores["r2-t01"] > scores["r1-t00"] > 0


def test_prioritize_never_scores_a_node_its_filter_refused_above_one_it_passed(served: Served) -> None:
    pod = pod_json("picky", 2)
    pod["spec"]["nodeSelector"] = {CLIQUE: "r1"}  # rack r2 is not for it, however well it would pack there
    names = ["r2-t01", "r1-t00", "r1-t05"]  # r1-t05 is cordoned
    _, before = served.post("prioritize", names_args(pod, names))
    assert {h["Host"]: h["Score"] for h in before}["r2-t01"] > 0  # asked first, prioritize packs by free GPUs only
    _, filtered = served.post("filter", names_args(pod, names))
    assert filtered["NodeNames"] == ["r1-t00"]
    _, after = served.post("prioritize", names_args(pod, names))
    scores = {h["Host"]: h["Score"] for h in after}
    assert scores["r1-t00"] > 0 and scores["r2-t01"] == 0 and scores["r1-t05"] == 0


def test_prioritize_with_full_nodes(served: Served) -> None:
    nodes = [node_dict(n, labels={CLIQUE: "r2", TIER1: "leaf-a"}) for n in ("r2-t01", "r2-t02")]
    body = {"Pod": pod_json("p", 2), "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}
    status, result = served.post("prioritize", body)
    assert status == 200 and [h["Host"] for h in result] == ["r2-t01", "r2-t02"]


def test_pods_without_gpus_pass_through_untouched(served: Served) -> None:
    names = ["cpu-1", "r1-t05", "nowhere"]
    _, result = served.post("filter", names_args(pod_json("web", 0), names))
    assert result["NodeNames"] == names and result["FailedNodes"] == {} and result["FailedAndUnresolvableNodes"] == {}
    _, scores = served.post("prioritize", names_args(pod_json("web", 0), names))
    assert scores == []


def gang_pod(i: int, *, size: int = 3) -> dict[str, Any]:
    return pod_json(f"g-{i}", 4, labels={"kilter.dev/gang": "trainer", "kilter.dev/gang-size": str(size)})


def bind(served: Served, pod: dict[str, Any], node: str) -> dict[str, Any]:
    """Filter (as the scheduler always does first), then bind."""
    served.post("filter", names_args(pod, [node]))
    meta = pod["metadata"]
    status, result = served.post(
        "bind", {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
    )
    assert status == 200
    assert isinstance(result, dict)
    return result


def test_a_gang_is_planned_whole_by_its_first_pod_and_later_pods_are_held_to_the_plan(served: Served) -> None:
    everything = [*RACK1, *RACK2]
    _, first = served.post("filter", names_args(gang_pod(0), everything))
    planned = first["NodeNames"]
    # Three 4-GPU pods: packed into one rack (the busier one keeps the idle rack whole), never onto busy trays.
    assert len(planned) == 3 and all(n.startswith("r2-") for n in planned)
    assert "r2-t00" not in planned and "r2-t01" not in planned
    held = first["FailedAndUnresolvableNodes"]
    assert set(held) == set(everything) - set(planned)
    assert "gang" in held["r1-t00"]
    assert bind(served, gang_pod(0), planned[0]) == {"Error": ""}
    _, second = served.post("filter", names_args(gang_pod(1), everything))
    assert second["NodeNames"] == planned[1:]
    _, scores = served.post("prioritize", names_args(gang_pod(1), everything))
    top = {h["Host"] for h in scores if h["Score"] == 10}
    assert top == set(planned[1:])
    bind(served, gang_pod(1), planned[1])
    bind(served, gang_pod(2), planned[2])
    assert served.app.extender.gangs.open_count() == 0  # every slot bound: the plan is done
    # The three bound pods hold their GPUs: an ordinary 4-GPU pod no longer fits those trays.
    _, after = served.post("filter", names_args(pod_json("late", 4), planned))
    assert after["NodeNames"] == [] and set(after["FailedNodes"]) == set(planned)


def test_a_plan_whose_node_vanishes_is_made_again(served: Served) -> None:
    _, first = served.post("filter", names_args(gang_pod(0, size=2), RACK2))
    planned = first["NodeNames"]
    gone = planned[0]
    objects = [o for o in cluster_objects() if o["metadata"]["name"] != gone]
    served.replace(objects)
    deadline = time.monotonic() + 10
    while gone in served.store.fleet().node_index:
        assert time.monotonic() < deadline, "the snapshot was not reloaded"
        time.sleep(0.05)
    _, again = served.post("filter", names_args(gang_pod(0, size=2), RACK2))
    assert len(again["NodeNames"]) == 2 and gone not in again["NodeNames"]
    assert served.app.extender.gangs.replanned == 1


def test_a_gang_that_does_not_fit_waits_with_failed_nodes_so_preemption_can_help(served: Served) -> None:
    pod = pod_json("huge-0", 4, labels={"kilter.dev/gang": "huge", "kilter.dev/gang-size": "40"})
    _, result = served.post("filter", names_args(pod, RACK1[:3]))
    assert result["NodeNames"] == [] and set(result["FailedNodes"]) == set(RACK1[:3])
    assert "does not fit" in result["FailedNodes"]["r1-t00"]


def test_preempt_keeps_only_victims_that_really_run_on_the_node(served: Served) -> None:
    body = {
        "Pod": pod_json("urgent", 4),
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {
            "r2-t00": {"Pods": [{"UID": "uid-busy"}, {"UID": "uid-ghost"}], "NumPDBViolations": 0},
            "r2-t02": {"Pods": [{"UID": "uid-busy"}], "NumPDBViolations": 0},  # busy runs on r2-t00, not here
            "r2-t01": {"Pods": [{"UID": "uid-half"}], "NumPDBViolations": 1},
        },
    }
    status, result = served.post("preempt", body)
    assert status == 200 and list(result) == ["NodeNameToMetaVictims"]
    assert result["NodeNameToMetaVictims"] == {
        "r2-t00": {"Pods": [{"UID": "uid-busy"}], "NumPDBViolations": 0},
        "r2-t01": {"Pods": [{"UID": "uid-half"}], "NumPDBViolations": 1},
    }


def test_preempt_drops_a_node_where_the_victims_free_too_little(served: Served) -> None:
    body = {
        "Pod": pod_json("urgent", 4),
        "NodeNameToVictims": {"r2-t01": {"Pods": [pod_json("half", 2, node="r2-t01")], "NumPDBViolations": 0}},
        "NodeNameToMetaVictims": None,
    }
    objects = cluster_objects()
    objects.append(pod_json("other", 2, node="r2-t01"))
    served.replace(objects)
    deadline = time.monotonic() + 10
    while served.store.pod("uid-other") is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    _, result = served.post("preempt", body)
    assert result == {"NodeNameToMetaVictims": {}}
    _, explained, _ = served.call("GET", "/debug/explain?namespace=ml&pod=urgent")
    nodes = json.loads(explained)["decisions"][-1]["nodes"]
    assert nodes == [
        {"node": "r2-t01", "verdict": "dropped", "reason": "evicting these victims frees 2 GPUs; the pod needs 4"}
    ]


def test_bind_records_the_binding_in_snapshot_mode(served: Served) -> None:
    assert bind(served, pod_json("p", 4), "r1-t00") == {"Error": ""}
    _, result = served.post("filter", names_args(pod_json("q", 4), ["r1-t00", "r1-t01"]))
    assert result["NodeNames"] == ["r1-t01"]
    assert bind(served, pod_json("p", 4), "r1-t00") == {"Error": ""}  # a retried bind books nothing twice
    _, result = served.post("filter", names_args(pod_json("q", 1), ["r1-t00"]))
    assert result["NodeNames"] == []


def test_a_bind_to_another_node_than_the_pod_is_bound_to_is_refused_by_the_api(served: Served) -> None:
    if served.cluster is None:
        pytest.skip("a snapshot has no API server to refuse the second binding")
    assert bind(served, pod_json("p", 4), "r1-t00") == {"Error": ""}
    status, result = served.post("bind", {"PodName": "p", "PodNamespace": "ml", "PodUID": "uid-p", "Node": "r1-t01"})
    assert status == 200 and "already assigned to node" in result["Error"]


def test_explain_shows_each_nodes_verdict_and_reason(served: Served) -> None:
    served.post("filter", names_args(pod_json("p", 4), ["r1-t00", "r2-t00", "cpu-1"]))
    served.post("prioritize", names_args(pod_json("p", 4), ["r1-t00", "r2-t00"]))
    status, body, response = served.call("GET", "/debug/explain?namespace=ml&pod=p")
    assert status == 200 and response.getheader("content-type") == "application/json"
    filtered, scored = json.loads(body)["decisions"]
    assert filtered["verb"] == "filter" and filtered["summary"].startswith("1 of 3 nodes pass")
    assert filtered["nodes"][0] == {"node": "r1-t00", "verdict": "passed", "reason": "passes"}
    assert filtered["nodes"][1]["verdict"] == "failed" and "0 of 4" in filtered["nodes"][1]["reason"]
    assert filtered["nodes"][2]["verdict"] == "unresolvable"
    assert [n["score"] for n in scored["nodes"]][1] == 0
    assert served.call("GET", "/debug/explain?namespace=ml&pod=never-seen")[0] == 404
    assert served.call("GET", "/debug/explain?pod=p")[0] == 400


def test_health_readiness_and_metrics(served: Served) -> None:
    assert served.call("GET", "/healthz")[:2] == (200, b"ok\n")
    assert served.call("GET", "/readyz")[0] == 200
    served.post("filter", names_args(pod_json("p", 4), ["r1-t00"]))
    status, body, _ = served.call("GET", "/metrics")
    text = body.decode()
    assert status == 200
    assert 'kilter_extender_requests_total{code="200",path="/scheduler/filter"} 1.0' in text
    assert 'kilter_extender_request_duration_seconds_count{verb="filter"} 1.0' in text
    assert 'kilter_extender_decisions_total{outcome="fits",verb="filter"} 1.0' in text
    assert "kilter_gang_plans_open 0.0" in text


def test_the_extender_also_speaks_https(tls_served: Served) -> None:
    status, result = tls_served.post("filter", names_args(pod_json("p", 4), ["r1-t00", "r2-t00"]))
    assert status == 200 and result["NodeNames"] == ["r1-t00"]


def test_a_keep_alive_connection_serves_many_requests(served: Served) -> None:
    conn = served.connect()
    body = json.dumps(names_args(pod_json("p", 4), RACK1)).encode()
    for verb in ("filter", "prioritize") * 20:
        conn.request("POST", f"/scheduler/{verb}", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200
        assert response.getheader("server-timing", "").startswith("app;dur=")
        response.read()
    conn.close()

"""kube-scheduler's extender over loopback with spare nodes: a gang's plan never takes them, /metrics and
/debug/explain show them, a changed ResourceFlavor moves them, and a bad count is a /readyz line.

The scenario: two idle GB200 NVL72 racks, ``r1`` and ``r2``, 18 trays of 4
GPUs; the ResourceFlavor ``gb200`` (no nodeLabels: every GPU node) asks for 2
spare nodes a domain, so each rack keeps its top two trays (t16, t17) and new
plans see 16 trays a rack.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from kilter.cli.serve import build_app
from tests.extenders.conftest import Served, _Server, names_args, pod_json, serve_config, serve_snapshot
from tests.gangs.wait_scenario import gang_pods
from tests.live_mode import live_cluster, wait_ready
from tests.topology.builders import CLIQUE, TIER1, node_dict

KEY = "kilter.dev/spare-nodes-per-domain"
NODES = [f"{rack}-t{t:02d}" for rack in ("r1", "r2") for t in range(18)]
SPARES = {"r1-t16", "r1-t17", "r2-t16", "r2-t17"}


def flavor(count: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "gb200", "annotations": {KEY: count}},
        "spec": {},
    }


def objects(count: str = "2", *, busy: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    nodes = [node_dict(n, labels={CLIQUE: n.split("-")[0], TIER1: "leaf-a"}) for n in NODES]
    return [*nodes, *(pod_json(f"busy-{n}", 4, node=n) for n in busy), flavor(count)]


def metric(served: Served, name: str) -> float | None:
    """The GB200 series of ``name``; None when it has none (no domain of the platform asks for spares)."""
    status, body, _ = served.call("GET", "/metrics")
    assert status == 200
    line = next((x for x in body.decode().splitlines() if x.startswith(f'{name}{{platform="GB200-NVL72"}} ')), None)
    return None if line is None else float(line.split()[-1])


def planned_nodes(served: Served, gang: str) -> set[str]:
    return {held.node for held in served.store.reservation(f"ml/gang/{gang}")}


def test_a_gang_plan_never_takes_a_spare_even_when_it_must_split(tmp_path: Path) -> None:
    # 17 whole-tray pods: one rack would hold 18, but keeps 2, so 16 + 1 over both racks; no spare is used.
    pods = gang_pods("big", time.time(), pods=17)
    with serve_snapshot(tmp_path, objects()) as served:
        status, answer = served.post("filter", names_args(pods[0], NODES))
        assert status == 200 and isinstance(answer, dict)
        planned = planned_nodes(served, "big")
        assert len(planned) == 17 and not planned & SPARES
        assert {n.split("-")[0] for n in planned} == {"r1", "r2"}
        assert set(answer["NodeNames"]) <= planned
        assert set(answer["FailedAndUnresolvableNodes"]) >= SPARES  # not on the plan
        assert metric(served, "kilter_spare_nodes_held") == 4.0
        assert metric(served, "kilter_spare_nodes_wanted") == 4.0
        assert metric(served, "kilter_spare_nodes_used") == 0.0
        status, data, _ = served.call("GET", "/debug/explain?namespace=ml&pod=big-0")
        assert status == 200
        summary = json.loads(data)["decisions"][-1]["summary"]
        assert summary.endswith(f"4 spare nodes kept out of new plans ({KEY})"), summary


def test_a_gang_that_needs_the_spares_does_not_fit_and_says_why(tmp_path: Path) -> None:
    pods = gang_pods("huge", time.time(), pods=33)  # 33 trays of the 32 new plans may use
    with serve_snapshot(tmp_path, [*objects(), *pods]) as served:
        _, answer = served.post("filter", names_args(pods[0], NODES))
        assert answer["NodeNames"] == []
        reasons = set(answer["FailedNodes"].values()) | set(answer["FailedAndUnresolvableNodes"].values())
        assert any("4 spare nodes kept out of new plans" in r for r in reasons), reasons
        assert planned_nodes(served, "huge") == set()


def test_a_full_domain_fills_its_spare_places_and_metrics_count_them_used(tmp_path: Path) -> None:
    # r1 runs 17 trays (a repair could have put some of them there): 1 tray idle, held; 2 - 1 = 1 used.
    busy = tuple(f"r1-t{t:02d}" for t in range(17))
    with serve_snapshot(tmp_path, objects(busy=busy)) as served:
        assert metric(served, "kilter_spare_nodes_held") == 3.0  # r1-t17, r2-t16, r2-t17
        assert metric(served, "kilter_spare_nodes_used") == 1.0
        assert metric(served, "kilter_spare_nodes_short") == 0.0


def test_a_changed_flavor_moves_the_spares_and_a_bad_count_is_skipped_with_a_readyz_line(tmp_path: Path) -> None:
    pods = gang_pods("all", time.time(), pods=36)
    with serve_snapshot(tmp_path, [*objects("2"), *pods]) as served:
        assert metric(served, "kilter_spare_nodes_held") == 4.0
        served.replace([*objects("5"), *pods])  # only the ResourceFlavor changes: no node does
        deadline = time.monotonic() + 10
        while metric(served, "kilter_spare_nodes_held") != 10.0:
            assert time.monotonic() < deadline, "the snapshot was not reloaded"
            time.sleep(0.05)
        served.replace([*objects("lots"), *pods])
        while metric(served, "kilter_spare_nodes_held") is not None:  # the bad count is skipped: no spares
            assert time.monotonic() < deadline, "the snapshot was not reloaded"
            time.sleep(0.05)
        status, body, _ = served.call("GET", "/readyz")
        assert status == 200
        lines = body.decode().splitlines()
        assert lines[0] == "ok"
        assert f"ResourceFlavor gb200: {KEY} must be a whole number from 0 to 18, got 'lots'; skipped" in lines
        served.post("filter", names_args(pods[0], NODES))
        assert len(planned_nodes(served, "all")) == 36  # every tray: nothing is held


def test_the_fleet_default_flag_holds_spares_without_any_annotation(tmp_path: Path) -> None:
    bare = [o for o in objects() if o["kind"] != "ResourceFlavor"]
    pods = gang_pods("g", time.time(), pods=34)
    with serve_snapshot(tmp_path, [*bare, *pods], spare_nodes_per_domain=1) as served:
        assert metric(served, "kilter_spare_nodes_held") == 2.0
        served.post("filter", names_args(pods[0], NODES))
        assert planned_nodes(served, "g") == set(NODES) - {"r1-t17", "r2-t17"}


def test_live_a_flavor_annotated_through_the_api_moves_the_spares_the_plan_avoids(tmp_path: Path) -> None:
    pods = gang_pods("live", time.time(), pods=17)
    with live_cluster(tmp_path, [*objects("1"), *pods]) as cluster:
        app, store = build_app(serve_config(None, kubeconfig=cluster.kubeconfig))
        with _Server(app, None) as port:
            wait_ready(store)
            served = Served(app, store, None, port, cluster=cluster)
            assert metric(served, "kilter_spare_nodes_held") == 2.0  # r1-t17, r2-t17
            served.replace([*objects("2"), *pods])  # a watch event on the ResourceFlavor alone
            assert metric(served, "kilter_spare_nodes_held") == 4.0
            served.post("filter", names_args(pods[0], NODES))
            planned = planned_nodes(served, "live")
            assert len(planned) == 17 and not planned & SPARES


def test_a_lone_gpu_pod_is_kept_off_the_spares_unresolvably(tmp_path: Path) -> None:
    with serve_snapshot(tmp_path, objects()) as served:
        _, answer = served.post("filter", names_args(pod_json("lone", 4), NODES))
        assert set(answer["NodeNames"]) == set(NODES) - SPARES
        assert answer["FailedAndUnresolvableNodes"] == {
            n: f"kept spare for repairs of running gangs ({KEY})" for n in sorted(SPARES)
        }

"""A maintenance request carried out by a real ``kilter serve`` process (its Configuration's ``lifecycle`` section)
against the list/watch test server: nodes annotated, cordoned, their gang evicted within its budget, handed to
the tooling, re-qualified and returned, with the request counted on ``/metrics``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kilter.lifecycle.progress import MAINTENANCE, MAINTENANCE_DONE, progress_of
from kilter.model.annotations import LIFECYCLE
from kilter.topology.lifecycle import QUALIFICATION, QUALIFICATION_SUITE
from tests.extenders.conftest import pod_json
from tests.listwatch import NODES, PDBS, PODS, ListWatchServer, Resource
from tests.live_mode import kubeconfig
from tests.local_http import free_port, get_text
from tests.topology.builders import CLIQUE, node_dict

TOKEN = "maintenance-live"
EVENTS = Resource("", "v1", "events", "Event", namespaced=True)


def until(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def cluster() -> Iterator[ListWatchServer]:
    with ListWatchServer([NODES, PODS, PDBS, EVENTS], token=TOKEN) as server:
        for rack in ("r1", "r2"):
            for t in range(2):
                server.add(node_dict(f"{rack}-t{t}", labels={CLIQUE: rack}))
        for t in range(2):
            labels = {"kilter.dev/gang": "train", "kilter.dev/gang-size": "2"}
            pod = pod_json(f"train-{t}", 4, node=f"r1-t{t}", labels=labels)
            pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
            server.add(pod)
        server.add(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "train", "namespace": "ml", "generation": 1},
                "spec": {"maxUnavailable": 2, "selector": {"matchLabels": {"kilter.dev/gang": "train"}}},
                "status": {"observedGeneration": 1, "disruptionsAllowed": 2, "currentHealthy": 2, "desiredHealthy": 0},
            }
        )
        yield server


@pytest.fixture
def kilter(cluster: ListWatchServer, tmp_path: Path) -> Iterator[int]:
    http = free_port()
    config = {
        "apiVersion": "config.kilter.dev/v1alpha1",
        "kind": "Configuration",
        "state": {"kubeconfig": str(kubeconfig(tmp_path / "kubeconfig", cluster.port, TOKEN))},
        "listeners": {"httpPort": http, "webhookPort": free_port(), "grpcPort": free_port()},
        "lifecycle": {"enabled": True, "interval": "0.2s", "suite": "nccl", "maxUnavailableDomains": 1},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    argv = [sys.executable, "-m", "kilter.cli", "serve", "--config", str(path)]
    with (tmp_path / "kilter.log").open("w", encoding="utf-8") as log:
        process = subprocess.Popen(argv, env={**os.environ}, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        until(lambda: '"ready":true' in get_text(http, "/readyz").replace(" ", ""), "kilter serve ready")
        yield http
    finally:
        process.terminate()
        process.wait(timeout=20)


def node(cluster: ListWatchServer, name: str) -> dict[str, Any]:
    return cluster.get_object(NODES, None, name)


def label(cluster: ListWatchServer, name: str, key: str) -> str | None:
    return (node(cluster, name)["metadata"].get("labels") or {}).get(key)


def edit(
    cluster: ListWatchServer, name: str, *, labels: dict[str, str] | None = None, notes: dict[str, str] | None = None
) -> None:
    obj = node(cluster, name)
    obj["metadata"].setdefault("labels", {}).update(labels or {})
    obj["metadata"].setdefault("annotations", {}).update(notes or {})
    cluster.update(obj)


def requests_metric(port: int) -> dict[str, float]:
    out = {}
    for family in text_string_to_metric_families(get_text(port, "/metrics")):
        for sample in family.samples:
            if sample.name == "kilter_maintenance_requests":
                out[sample.labels["state"]] = sample.value
    return out


def test_a_request_on_the_nodes_is_carried_out_by_kilter_serve(cluster: ListWatchServer, kilter: int) -> None:
    rack = ("r1-t0", "r1-t1")
    for name in rack:
        edit(cluster, name, notes={MAINTENANCE: "fw-2027-01"})
    until(lambda: all(label(cluster, n, LIFECYCLE) == "maintenance" for n in rack), "the rack handed to maintenance")
    assert not [p for p in cluster.list_objects(PODS) if p["metadata"]["name"].startswith("train")]
    assert all(node(cluster, n)["spec"].get("unschedulable") for n in rack)
    assert not node(cluster, "r2-t0").get("spec", {}).get("unschedulable")
    assert requests_metric(kilter).get("running") == 1
    for name in rack:
        edit(cluster, name, labels={MAINTENANCE_DONE: "true"})
    until(lambda: all(label(cluster, n, LIFECYCLE) == "qualifying" for n in rack), "re-qualification")
    for name in rack:
        edit(cluster, name, labels={QUALIFICATION: "passed", QUALIFICATION_SUITE: "nccl"})
    until(lambda: all(label(cluster, n, LIFECYCLE) == "ready" for n in rack), "the rack back in service")
    until(lambda: requests_metric(kilter).get("done") == 1, "the request counted done")
    for name in rack:
        progress = progress_of(node(cluster, name))
        assert not node(cluster, name)["spec"].get("unschedulable")
        assert progress is not None and progress.served == ("fw-2027-01",)

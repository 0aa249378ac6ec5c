"""The AdmissionCheck controller against the list/watch test server, which applies as kube-apiserver does.

Server-side apply with the field manager ``kilter.dev/topology`` through each Workload's ``/status``: kilter's
entry of ``status.admissionChecks`` is merged by its key (the check's name) beside Kueue's and other
controllers' entries, never replacing them, and kilter owns exactly its own entry afterwards.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from kilter.kube.api import ApiServer
from kilter.state.store import ClusterStore
from kilter.webhooks.admissioncheck import CONTROLLER_NAME, Controller
from tests.listwatch import ListWatchServer
from tests.live_mode import RESOURCES
from tests.webhooks.test_admissioncheck import CHECK, objects

WORKLOADS = next(r for r in RESOURCES if r.plural == "workloads")
CHECKS = next(r for r in RESOURCES if r.plural == "admissionchecks")
KUEUE_MANAGER = "kueue-admission"  # the manager Kueue's workload controller applies status with


@pytest.fixture
def cluster() -> Iterator[ListWatchServer]:
    with ListWatchServer(RESOURCES) as server:
        for obj in objects():
            server.add(obj)
        yield server


def _apply_as_kueue(server: ListWatchServer, name: str, checks: list[dict[str, Any]]) -> None:
    api = ApiServer("http", server.host, server.port, user_agent="kueue-in-the-test")
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "ml"},
        "status": {"admissionChecks": checks},
    }
    api.apply(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/ml/workloads/{name}/status", body, field_manager=KUEUE_MANAGER)


def _owned(obj: dict[str, Any], manager: str) -> dict[str, Any]:
    entries = [m for m in obj["metadata"].get("managedFields", []) if m["manager"] == manager]
    assert len(entries) == 1, [m["manager"] for m in obj["metadata"].get("managedFields", [])]
    entry: dict[str, Any] = entries[0]
    return entry


def test_kilters_entry_is_merged_beside_the_others_and_owned_by_kilter(cluster: ListWatchServer) -> None:
    pending = {"state": "Pending", "lastTransitionTime": "2026-12-01T10:00:00Z", "message": ""}
    _apply_as_kueue(cluster, "fits", [{"name": CHECK, **pending}, {"name": "other-check", **pending}])
    store = ClusterStore()
    store.replace(objects())
    ctl = Controller(store, ApiServer("http", cluster.host, cluster.port))
    asyncio.run(ctl.run_once())
    assert ctl.errors == 0 and ctl.decided["Ready"] >= 1
    fits = cluster.get_object(WORKLOADS, "ml", "fits")
    entries = {c["name"]: c for c in fits["status"]["admissionChecks"]}
    assert entries["other-check"]["state"] == "Pending", "another controller's entry is kept"
    assert entries[CHECK]["state"] == "Ready" and entries[CHECK]["podSetUpdates"]
    assert fits["status"]["conditions"][0]["type"] == "QuotaReserved", "Kueue's conditions are untouched"
    ours = _owned(fits, CONTROLLER_NAME)
    assert (ours["operation"], ours["subresource"]) == ("Apply", "status")
    owned = ours["fieldsV1"]["f:status"]["f:admissionChecks"]
    assert list(owned) == [json.dumps({"name": CHECK}, separators=(",", ":")).join(("k:", ""))]
    check = cluster.get_object(CHECKS, None, CHECK)
    assert [(c["type"], c["status"]) for c in check["status"]["conditions"]] == [("Active", "True")]


def test_a_second_round_writes_nothing(cluster: ListWatchServer) -> None:
    store = ClusterStore()
    store.replace(objects())
    ctl = Controller(store, ApiServer("http", cluster.host, cluster.port))
    asyncio.run(ctl.run_once())
    versions = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in cluster.objects(WORKLOADS)}
    asyncio.run(ctl.run_once())
    assert {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in cluster.objects(WORKLOADS)} == versions

"""MultiKueue's side, played in the tests: Kueue's writes to a manager Workload and its copies in workers.

What it does is what Kueue's code does (``pkg/controller/admissionchecks/multikueue/workload.go``,
``pkg/workload/patching``), through the list/watch test server's real server-side apply:

* ``reserve``: the manager's scheduler reserves quota (``QuotaReserved=True``, ``admission``) and the MultiKueue
  check is ``Pending``; applied as ``kueue-admission`` with force, like every admission status write of Kueue.
* ``MultiKueue.sync``: copies of a Workload (same name and namespace, label ``kueue.x-k8s.io/multikueue-origin``)
  exist exactly in its nominated clusters; a worker admits its copy when ``admits`` says so (``Admitted=True``
  on the copy); the copy admitted earliest wins: the manager Workload gets ``clusterName`` and loses its
  nominations, its check turns ``Ready`` (message ``The workload was admitted on "<cluster>"``), in one apply as
  ``kueue-admission`` carrying the whole admission status, and the other copies are deleted.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kilter.kube.api import ApiError, ApiServer
from tests.listwatch import ListWatchServer, Resource
from tests.live_mode import RESOURCES

Obj = dict[str, Any]
KUEUE = "kueue.x-k8s.io"
API = f"/apis/{KUEUE}/v1beta2"
KUEUE_ADMISSION = "kueue-admission"
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
CHECK = "multikueue"
CONFIG = "pool"

MULTIKUEUE_CLUSTERS = Resource(
    KUEUE, "v1beta2", "multikueueclusters", "MultiKueueCluster", namespaced=False, status=True
)
MULTIKUEUE_CONFIGS = Resource(KUEUE, "v1beta2", "multikueueconfigs", "MultiKueueConfig", namespaced=False)
POOL_RESOURCES = [*RESOURCES, MULTIKUEUE_CLUSTERS, MULTIKUEUE_CONFIGS]
WORKLOADS = next(r for r in RESOURCES if r.plural == "workloads")


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def workload(
    name: str, pods: int, gpus: int, *, queue: str = "research", annotations: dict[str, str] | None = None
) -> Obj:
    """A Kueue Workload of one GPU pod set, as the job integration makes it."""
    return {
        "apiVersion": f"{KUEUE}/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "annotations": annotations or {}},
        "spec": {
            "queueName": queue,
            "podSets": [
                {
                    "name": "main",
                    "count": pods,
                    "template": {
                        "spec": {
                            "containers": [{"name": "train", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]
                        }
                    },
                }
            ],
        },
    }


def manager_objects(clusters: list[str]) -> list[Obj]:
    """The manager's MultiKueue AdmissionCheck, its MultiKueueConfig and one Active MultiKueueCluster per name."""
    return [
        {
            "apiVersion": f"{KUEUE}/v1beta2",
            "kind": "AdmissionCheck",
            "metadata": {"name": CHECK},
            "spec": {
                "controllerName": "kueue.x-k8s.io/multikueue",
                "parameters": {"apiGroup": KUEUE, "kind": "MultiKueueConfig", "name": CONFIG},
            },
        },
        {
            "apiVersion": f"{KUEUE}/v1beta2",
            "kind": "MultiKueueConfig",
            "metadata": {"name": CONFIG},
            "spec": {"clusters": clusters},
        },
        *(
            {
                "apiVersion": f"{KUEUE}/v1beta2",
                "kind": "MultiKueueCluster",
                "metadata": {"name": c},
                "spec": {"clusterSource": {"kubeConfig": {"location": c, "locationType": "Secret"}}},
                "status": {"conditions": [{"type": "Active", "status": "True", "reason": "Active", "message": ""}]},
            }
            for c in clusters
        ),
    ]


def kueue_api(server: ListWatchServer) -> ApiServer:
    headers = {"Authorization": f"Bearer {server.token}"} if server.token else {}
    return ApiServer("http", server.host, server.port, headers=headers, user_agent="kueue-in-the-test")


def _status_path(namespace: str, name: str) -> str:
    return f"{API}/namespaces/{namespace}/workloads/{name}/status"


def _apply_status(server: ListWatchServer, wl: Obj, status: Obj, manager: str = KUEUE_ADMISSION) -> Obj:
    meta = wl["metadata"]
    body = {
        "apiVersion": f"{KUEUE}/v1beta2",
        "kind": "Workload",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "status": status,
    }
    result: Obj = kueue_api(server).apply(_status_path(meta["namespace"], meta["name"]), body, field_manager=manager)
    return result


def _condition(kind: str, status: str = "True", reason: str = "") -> Obj:
    return {"type": kind, "status": status, "reason": reason or kind, "message": "", "lastTransitionTime": now()}


def reserve(server: ListWatchServer, wl: Obj, cluster_queue: str = "research") -> Obj:
    """The manager's Kueue reserves quota for ``wl``: QuotaReserved, admission, the MultiKueue check Pending."""
    pods = wl["spec"]["podSets"][0]["count"]
    status = {
        "admission": {
            "clusterQueue": cluster_queue,
            "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "gpu"}, "count": pods}],
        },
        "conditions": [_condition("QuotaReserved")],
        "admissionChecks": [{"name": CHECK, "state": "Pending", "message": "", "lastTransitionTime": now()}],
    }
    return _apply_status(server, wl, status)


def _admission_status(live: Obj) -> Obj:
    """What Kueue's admission status patch carries of a Workload (``admissionStatusPatch`` and the checks)."""
    status = live.get("status") or {}
    keep = ("admission", "conditions", "admissionChecks", "clusterName", "nominatedClusterNames")
    return {k: copy.deepcopy(status[k]) for k in keep if k in status}


@dataclass
class MultiKueue:
    """The manager region's MultiKueue and its workers: ``workers`` maps a cluster name to its API server."""

    manager: ListWatchServer
    workers: dict[str, ListWatchServer]
    admits: Callable[[str, Obj], bool]  # (cluster, the copy) -> does that worker's Kueue admit it now
    admitted_in: dict[str, list[str]] = field(default_factory=dict)  # workload -> clusters whose copy was admitted
    copies_made: dict[str, set[str]] = field(default_factory=dict)  # workload -> clusters a copy was ever made in
    on_win: Callable[[str, Obj], None] | None = None  # (cluster, copy): run the job there (bind its pods)

    def sync(self) -> None:
        """One pass over every manager Workload, as MultiKueue's workload reconciler does."""
        for wl in self.manager.list_objects(WORKLOADS):
            self._sync_one(wl)

    def _sync_one(self, wl: Obj) -> None:
        meta, status = wl["metadata"], wl.get("status") or {}
        name = meta["name"]
        if status.get("clusterName"):
            return
        nominated = list(status.get("nominatedClusterNames") or [])
        for cluster, worker in self.workers.items():
            held = worker.find_object(WORKLOADS, meta["namespace"], name)
            if cluster in nominated and held is None:
                remote = {
                    "apiVersion": wl["apiVersion"],
                    "kind": "Workload",
                    "metadata": {
                        "name": name,
                        "namespace": meta["namespace"],
                        "labels": {**(meta.get("labels") or {}), ORIGIN_LABEL: "multikueue"},
                        "annotations": dict(meta.get("annotations") or {}),
                    },
                    "spec": copy.deepcopy(wl["spec"]),
                }
                worker.add(remote)
                self.copies_made.setdefault(name, set()).add(cluster)
            elif cluster not in nominated and held is not None and not _admitted(held):
                worker.delete(KUEUE, "workloads", meta["namespace"], name)
        firsts = []
        for cluster in nominated:
            if cluster not in self.workers:
                continue
            worker = self.workers[cluster]
            held = worker.find_object(WORKLOADS, meta["namespace"], name)
            if held is None:
                continue
            if not _admitted(held) and self.admits(cluster, held):
                held = _apply_status(
                    worker, held, {"conditions": [_condition("QuotaReserved"), _condition("Admitted")]}
                )
                self.admitted_in.setdefault(name, []).append(cluster)
            if _admitted(held):
                firsts.append((_admitted_at(held), cluster, held))
        if not firsts:
            return
        _, winner, remote = min(firsts)
        live = self.manager.get_object(WORKLOADS, meta["namespace"], name)
        status = _admission_status(live)
        status.pop("nominatedClusterNames", None)
        status["clusterName"] = winner
        status["admissionChecks"] = [
            {**c, "state": "Ready", "message": f'The workload was admitted on "{winner}"', "lastTransitionTime": now()}
            if c.get("name") == CHECK
            else c
            for c in status.get("admissionChecks") or []
        ]
        _apply_status(self.manager, live, status)
        for cluster, worker in self.workers.items():
            if cluster != winner and worker.find_object(WORKLOADS, meta["namespace"], name) is not None:
                worker.delete(KUEUE, "workloads", meta["namespace"], name)
        if self.on_win is not None:
            self.on_win(winner, remote)


def _admitted(wl: Obj) -> bool:
    return any(
        c.get("type") == "Admitted" and c.get("status") == "True"
        for c in (wl.get("status") or {}).get("conditions") or []
    )


def _admitted_at(wl: Obj) -> str:
    for c in (wl.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Admitted":
            return str(c.get("lastTransitionTime", ""))
    return ""


def write_is_refused(call: Callable[[], Any]) -> ApiError | None:
    try:
        call()
    except ApiError as exc:
        return exc
    return None

"""kilter's placement reached the way a cluster reaches it: a real ``kilter serve`` asked over HTTP.

``kilter demo`` starts the extender in-process on 127.0.0.1 over the demo
fleet and plays kube-scheduler to it. When the simulated Kueue admits a job,
its Workload and pods appear in kilter's state (as Kueue and the job
controller create them; each pod names its Workload, whose pod sets give the
gang's shape); then, pod by pod, the stand-in sends
``filter`` with the names of the nodes its own plugins would pass (free GPUs
enough, schedulable), ``prioritize`` for the survivors, takes the best score
and sends ``bind``. A gang kilter cannot place now is withdrawn (Kueue would
keep the job suspended). When the job ends its pods leave the state.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import msgspec
import numpy as np
import uvicorn
import uvloop

from kilter.cli.serve import build_app
from kilter.cli.serve_config import ServeConfig
from kilter.gangs.identity import KUEUE_WORKLOAD
from kilter.model.core_v1 import Pod
from kilter.model.jobs import ANNOTATION_REQUIRED, ANNOTATION_UNCONSTRAINED
from kilter.sim.gangs import Gang
from kilter.sim.placement import Nodes, free_gpus
from kilter.sim.simple import KilterPlacement
from kilter.state.store import ADDED, DELETED, ClusterStore, Event
from kilter.topology.fleet import Fleet

__all__ = ["ExtenderPlacement", "ExtenderServer"]

NAMESPACE = "demo"
KEEP_RELEASED = 256  # released gangs remembered for ``restore``, which follows its release at once


class ExtenderServer:
    """``kilter serve`` over a snapshot file, on its own event loop thread, with a door into its state."""

    def __init__(self, snapshot: Path) -> None:
        settings = ServeConfig(
            snapshot=snapshot, max_body_bytes=64 * 1024 * 1024, gang_timeout_s=3600.0, reload_interval_s=3600.0
        )
        self.app, self.store = build_app(settings)
        # IPPROTO_TCP, not 0: event loops only set TCP_NODELAY on sockets that say they are TCP.
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        config = uvicorn.Config(self.app, loop="none", http="httptools", access_log=False, log_level="warning")
        self._server = uvicorn.Server(config)
        self._loop = uvloop.new_event_loop()  # as kilter serve runs
        self._thread = threading.Thread(target=self._run, name="kilter-serve", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._server.serve(sockets=[self._sock]))
        finally:
            rest = asyncio.all_tasks(self._loop)  # the snapshot feed's watch, started with the app
            for task in rest:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
            self._loop.close()

    def __enter__(self) -> ExtenderServer:
        self._thread.start()
        for _ in range(2000):
            if self._server.started:
                return self
            if not self._thread.is_alive():
                break
            threading.Event().wait(0.01)
        raise RuntimeError("the in-process kilter serve did not start")

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    def change(self, events: Iterable[Event]) -> None:
        """Apply events to kilter's state on its own loop (the store is only ever touched there)."""
        batch = list(events)

        async def apply(store: ClusterStore = self.store) -> None:
            store.apply(batch)

        asyncio.run_coroutine_threadsafe(apply(), self._loop).result(timeout=30)


class _Client:
    """One HTTP/1.1 connection to the extender, kept alive, as kube-scheduler's extender client keeps its own.

    A plain socket rather than ``http.client``, whose header parsing (the
    ``email`` package) cost the demo more than kilter's answers did. The
    server always answers these verbs with a ``Content-Length``.
    """

    def __init__(self, port: int) -> None:
        self._sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._file = self._sock.makefile("rb")
        self._encode = msgspec.json.Encoder()

    def post(self, verb: str, body: dict[str, Any]) -> Any:
        payload = self._encode.encode(body)
        head = (
            f"POST /scheduler/{verb} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        )
        self._sock.sendall(head.encode("ascii") + payload)
        status = int(self._file.readline().split(b" ", 2)[1])
        length = None
        while (line := self._file.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if length is None:
            raise RuntimeError(f"{verb}: the answer has no Content-Length")
        data = self._file.read(length)
        if status != 200:
            raise RuntimeError(f"{verb} answered {status}: {data[:200]!r}")
        return json.loads(data)

    def close(self) -> None:
        self._file.close()
        self._sock.close()


def workload_object(gang: Gang, resource: str, topology: dict[str, str]) -> dict[str, Any]:
    """The job's Kueue Workload, one pod set per pod shape, as Kueue holds it for an admitted job."""
    pod_sets = [
        {
            "name": f"gpus-{gpus}",
            "count": count,
            "template": {
                "metadata": {"annotations": topology},
                "spec": {"containers": [{"name": "trainer", "resources": _resources(resource, gpus)}]},
            },
        }
        for count, gpus in gang.pod_sets
    ]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": f"job-{gang.job}", "namespace": NAMESPACE, "uid": f"job-{gang.job}-wl"},
        "spec": {"queueName": "demo", "podSets": pod_sets},
    }


def pod_object(gang: Gang, index: int, gpus: int, resource: str, topology: dict[str, str]) -> dict[str, Any]:
    """A pod of the gang as the API server holds it before scheduling, pointing at its Workload as Kueue's do."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"job-{gang.job}-{index}",
            "namespace": NAMESPACE,
            "uid": f"job-{gang.job}-{index}-uid",
            "labels": {"kueue.x-k8s.io/podset": f"gpus-{gpus}"},
            "annotations": {KUEUE_WORKLOAD: f"job-{gang.job}", **topology},
            "creationTimestamp": None,
        },
        "spec": {
            "schedulerName": "kilter-scheduler",
            "containers": [{"name": "trainer", "resources": _resources(resource, gpus)}],
        },
        "status": {"phase": "Pending"},
    }


def _resources(resource: str, gpus: int) -> dict[str, dict[str, str]]:
    return {"requests": {resource: str(gpus)}, "limits": {resource: str(gpus)}}


class ExtenderPlacement:
    """The ``kilter`` policy, every decision made by the extender over HTTP."""

    name = "kilter"
    waits_for_fewer_domains = True  # kilter's split-wait rule judges its previews, as in the simulator's kilter

    def __init__(self, server: ExtenderServer, on_call: Callable[[], None] | None = None) -> None:
        self.server = server
        self.client = _Client(server.port)
        self.calls = 0
        self._pods: dict[int, list[Pod]] = {}
        self._released: OrderedDict[int, list[Pod]] = OrderedDict()
        self._workloads: dict[int, dict[str, Any]] = {}
        self._on_call = on_call
        self._planner = KilterPlacement()

    def _topology(self, fleet: Fleet, gang: Gang) -> dict[str, str]:
        if gang.topology == "required":
            key = fleet.domain_label_key(fleet.platforms[gang.platform])
            return {ANNOTATION_REQUIRED: key or "kubernetes.io/hostname"}
        if gang.topology == "unconstrained":
            return {ANNOTATION_UNCONSTRAINED: "true"}
        return {}

    def preview(self, fleet: Fleet, gang: Gang) -> Nodes | None:
        """Where kilter would place the gang, without binding: the planner the extender runs, on the same fleet,
        so the simulator's split-wait rule judges a gang before any of its pods is bound (and never unbinds)."""
        return self._planner.place(fleet, gang)

    def place(self, fleet: Fleet, gang: Gang) -> Nodes | None:
        resource = fleet.platforms[gang.platform].device_resource
        topology = self._topology(fleet, gang)
        objects = [pod_object(gang, i, g, resource, topology) for i, g in enumerate(gang.pod_gpus())]
        pods = [msgspec.convert(o, Pod) for o in objects]
        workload = workload_object(gang, resource, topology)
        self._workloads[gang.job] = workload
        self.server.change([Event(ADDED, workload), *(Event(ADDED, p) for p in pods)])
        self._pods[gang.job] = pods
        free = free_gpus(fleet)
        names = fleet.node_names
        chosen: list[int] = []
        for obj, gpus in zip(objects, gang.pod_gpus(), strict=True):
            candidates = [names[i] for i in np.flatnonzero(free >= gpus).tolist()]
            node = self._schedule(obj, candidates) if candidates else None
            if node is None:
                self.release(gang.job)
                return None
            index = fleet.node_index[node]
            free[index] -= gpus
            chosen.append(index)
        self._pods[gang.job] = [
            msgspec.structs.replace(p, spec=msgspec.structs.replace(p.spec, node_name=names[n]))
            for p, n in zip(pods, chosen, strict=True)
        ]
        return np.asarray(chosen, dtype=np.int32)

    def _schedule(self, pod: dict[str, Any], candidates: list[str]) -> str | None:
        """One pod through filter, prioritize and bind, as kube-scheduler's extender calls go."""
        self.calls += 3
        if self._on_call is not None:
            self._on_call()
        passed = self.client.post("filter", {"Pod": pod, "Nodes": None, "NodeNames": candidates})
        if passed.get("Error"):
            raise RuntimeError(f"filter: {passed['Error']}")
        survivors = passed.get("NodeNames") or []
        if not survivors:
            return None
        scores = self.client.post("prioritize", {"Pod": pod, "Nodes": None, "NodeNames": survivors})
        rank = {name: i for i, name in enumerate(survivors)}
        best = max(scores, key=lambda h: (h["Score"], -rank[h["Host"]]))["Host"] if scores else survivors[0]
        meta = pod["metadata"]
        result = self.client.post(
            "bind", {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": best}
        )
        if result.get("Error"):
            raise RuntimeError(f"bind: {result['Error']}")
        return str(best)

    def close(self) -> None:
        self.client.close()

    def release(self, job: int) -> None:
        """The job's pods are gone (finished, evicted or withdrawn)."""
        pods = self._pods.pop(job, [])
        workload = self._workloads.pop(job, None)
        if pods:
            self.server.change([*(Event(DELETED, p) for p in pods), *([Event(DELETED, workload)] if workload else [])])
            self._released[job] = pods
            while len(self._released) > KEEP_RELEASED:
                self._released.popitem(last=False)

    def restore(self, job: int) -> None:
        """The job's pods are back where they were bound (a what-if release is undone)."""
        pods = self._released.pop(job, [])
        if pods:
            self.server.change(Event(ADDED, p) for p in pods)  # bound pods need no Workload to be booked
            self._pods[job] = pods

"""The lifecycle controller: moves GPU nodes through ``kilter.dev/lifecycle`` states, a round at a time.

Each round reads the nodes from the state kilter keeps (the watches), lets
``topology.lifecycle`` decide each node's next state from its health over
the rounds and its qualification labels, and writes each change as a merge
patch of the node's labels (under the node's ``resourceVersion``: a node
changed meanwhile is read again next round, never overwritten) and an
Event on the node. Only the leader writes. It touches labels only: a
cordon, a person's, stays as it is. With ``requests``, each round also
drains the maintenance asked for on the nodes (``lifecycle.requests``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable
from functools import partial

from kilter.kube.api import MERGE_PATCH, ApiError, ApiServer, object_path
from kilter.kube.events import EventRecorder, Involved
from kilter.lifecycle.requests import MaintenanceRequests
from kilter.model.annotations import LIFECYCLE
from kilter.model.errors import KilterError
from kilter.state.store import ClusterStore
from kilter.topology import pod_gpus
from kilter.topology.health import HealthSignals
from kilter.topology.lifecycle import (
    QUALIFICATION,
    QUALIFICATION_SUITE,
    FlapMemory,
    LifecyclePolicy,
    Transition,
    health_problem,
    next_state,
)

__all__ = ["FIELD_MANAGER", "LifecycleController"]

log = logging.getLogger("kilter.lifecycle")

FIELD_MANAGER = "kilter.dev/lifecycle"
REASONS = {
    "degraded": "KilterNodeDegraded",
    "repairing": "KilterNodeRepairing",
    "qualifying": "KilterNodeQualifying",
    "ready": "KilterNodeQualified",
}


class LifecycleController:
    """A round every ``interval_s`` while this replica writes; ``moved`` counts the transitions written."""

    def __init__(
        self,
        store: ClusterStore,
        api: ApiServer,
        *,
        policy: LifecyclePolicy | None = None,
        signals: HealthSignals | None = None,
        events: EventRecorder | None = None,
        interval_s: float = 10.0,
        wall: Callable[[], float] = time.time,
        is_writer: Callable[[], bool] = lambda: True,
        requests: MaintenanceRequests | None = None,
    ) -> None:
        self.store = store
        self.api = api
        self.policy = policy or LifecyclePolicy()
        self.signals = signals or store.health
        self.events = events
        self.interval_s = interval_s
        self.wall = wall
        self.is_writer = is_writer
        self.memory = FlapMemory()
        self.requests = requests  # maintenance asked for on the nodes, drained a round at a time
        self.moved: Counter[str] = Counter()  # to-state -> transitions written
        self.conflicts = 0  # writes refused because the node changed since the decision (409)
        self.errors = 0  # writes refused otherwise (RBAC: 403) or not made

    def _busy(self) -> Callable[[str], bool]:
        devices = sorted(self.store.catalog.device_resources)
        used: set[str] = set()
        for pod in self.store.pods():
            node = pod.spec.node_name
            if not node or pod.status.phase in ("Succeeded", "Failed"):
                continue
            if pod_gpus.holds_gpus(pod.spec, devices):  # a count that does not read: taken as something running
                used.add(node)
        return used.__contains__

    def decide(self) -> list[Transition]:
        """This round's transitions (observing each GPU node's health first), each carrying the resourceVersion
        of the node it was decided on."""
        now = self.wall()
        gpu_nodes = set(self.store.fleet().node_names)  # rebuilt only when nodes change, not with every pod
        busy: Callable[[str], bool] | None = None
        out = []
        for name in sorted(gpu_nodes):
            node = self.store.node_named(name)
            if node is None:
                continue
            problem = health_problem(node, self.signals)
            self.memory.observe(name, node.metadata.labels.get(LIFECYCLE, ""), problem, now, self.policy.window_s)
            if busy is None and node.metadata.labels.get(LIFECYCLE) == "degraded":
                busy = self._busy()  # the pods are looked at only when a degraded node waits on them
            move = next_state(node, problem, self.memory, self.policy, now, busy or (lambda _: True))
            if move is not None:
                out.append(dataclasses.replace(move, resource_version=node.metadata.resource_version))
        self.memory.forget(gpu_nodes)
        return out

    def write(self, move: Transition) -> bool:
        """The label (and Event) of one move, under the resourceVersion it was decided on: a node changed since,
        by a person or anyone, is a conflict, judged again next round; never overwritten."""
        if not move.resource_version:
            self.errors += 1
            log.warning("lifecycle of %s not written: the node as decided on has no resourceVersion", move.node)
            return False
        path = object_path("/api/v1", "nodes", move.node)
        node = self.store.node_named(move.node)
        labels: dict[str, str | None] = {LIFECYCLE: move.to_state}
        if move.clear_qualification:
            labels.update({QUALIFICATION: None, QUALIFICATION_SUITE: None})
        meta = {"labels": labels, "resourceVersion": move.resource_version}
        try:
            self.api.call("PATCH", f"{path}?fieldManager={FIELD_MANAGER}", {"metadata": meta}, content_type=MERGE_PATCH)
        except ApiError as exc:
            if exc.code == 409:
                self.conflicts += 1
                log.info("lifecycle of %s not written: it changed meanwhile (%s)", move.node, exc)
            else:
                self.errors += 1
                log.warning("lifecycle of %s not written: %s", move.node, exc)
            return False
        self.moved[move.to_state] += 1
        log.info("node %s: %s -> %s (%s)", move.node, move.from_state, move.to_state, move.reason)
        if self.events is not None:
            uid = node.metadata.uid if node is not None else ""
            message = f"{move.from_state} -> {move.to_state}: {move.reason}"
            warning = move.to_state in ("degraded",) or "failed" in move.reason
            self.events.record(
                Involved("v1", "Node", "", move.node, uid), REASONS[move.to_state], message, warning=warning
            )
        return True

    async def run_once(self) -> list[Transition]:
        if not self.store.ready:
            return []
        loop = asyncio.get_running_loop()
        written = []
        for move in self.decide():
            if not self.is_writer():  # leadership lost within the round: the new leader decides afresh
                break
            if await loop.run_in_executor(None, partial(self.write, move)):
                written.append(move)
        if self.requests is not None and self.is_writer():
            await loop.run_in_executor(None, self.requests.round)
        return written

    async def run(self) -> None:
        while True:
            if not self.is_writer():
                self.memory.forget()  # a leader again later starts from what it sees then, not from hours ago
            else:
                try:
                    await self.run_once()
                except KilterError as exc:
                    log.warning("lifecycle round failed: %s", exc)
                except Exception:
                    log.exception("lifecycle round failed")
            await asyncio.sleep(self.interval_s)

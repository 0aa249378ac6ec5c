"""The lifecycle controller: moves GPU nodes through ``kilter.dev/lifecycle`` states, a round at a time.

Each round reads the nodes from the state kilter keeps (the watches), lets
``topology.lifecycle`` decide each node's next state from its health over
the rounds and its qualification labels, and writes each change as a merge
patch of the node's labels (under the node's ``resourceVersion``: a node
changed meanwhile is read again next round, never overwritten) and an
Event on the node. Only the leader writes. It touches labels only: a
cordon, a person's, stays as it is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from functools import partial

from kilter.kube.api import ApiError, ApiServer, object_path
from kilter.kube.events import EventRecorder, Involved
from kilter.model.annotations import LIFECYCLE
from kilter.model.core_v1 import pod_request
from kilter.model.errors import InputError, KilterError
from kilter.state.store import ClusterStore
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
MERGE_PATCH = "application/merge-patch+json"
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
        self.moved: Counter[str] = Counter()  # to-state -> transitions written
        self.errors = 0

    def _busy(self) -> Callable[[str], bool]:
        devices = sorted(self.store.catalog.device_resources)
        used: set[str] = set()
        for pod in self.store.pods():
            node = pod.spec.node_name
            if not node or pod.status.phase in ("Succeeded", "Failed"):
                continue
            try:
                if any(pod_request(pod.spec, r) for r in devices):
                    used.add(node)
            except InputError:
                used.add(node)  # what it holds cannot be read: taken as something running
        return used.__contains__

    def decide(self) -> list[Transition]:
        """This round's transitions (observing each GPU node's health first)."""
        now = self.wall()
        state = self.store.state()
        gpu_nodes = set(state.fleet().node_names)
        busy = self._busy()
        out = []
        for node in state.nodes:
            name = node.metadata.name
            if name not in gpu_nodes:
                continue
            problem = health_problem(node, self.signals)
            self.memory.observe(name, problem, now, self.policy.window_s)
            move = next_state(node, problem, self.memory, self.policy, now, busy)
            if move is not None:
                out.append(move)
        self.memory.forget(gpu_nodes)
        return out

    def write(self, move: Transition) -> bool:
        path = object_path("/api/v1", "nodes", move.node)
        node = self.store.node_named(move.node)
        labels: dict[str, str | None] = {LIFECYCLE: move.to_state}
        if move.clear_qualification:
            labels.update({QUALIFICATION: None, QUALIFICATION_SUITE: None})
        meta: dict[str, object] = {"labels": labels}
        if node is not None and node.metadata.resource_version:
            meta["resourceVersion"] = node.metadata.resource_version
        try:
            self.api.call("PATCH", f"{path}?fieldManager={FIELD_MANAGER}", {"metadata": meta}, content_type=MERGE_PATCH)
        except ApiError as exc:
            self.errors += 1
            log.info("lifecycle of %s not written: %s", move.node, exc)
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
            if await loop.run_in_executor(None, partial(self.write, move)):
                written.append(move)
        return written

    async def run(self) -> None:
        while True:
            if self.is_writer():
                try:
                    await self.run_once()
                except KilterError as exc:
                    log.warning("lifecycle round failed: %s", exc)
                except Exception:
                    log.exception("lifecycle round failed")
            await asyncio.sleep(self.interval_s)

"""Maintenance asked for on the nodes themselves: ``kilter.dev/maintenance: NAME``, and kilter drains them.

A ticket system, a GitOps repository or a person with ``kubectl annotate``
asks for maintenance by annotating nodes; the nodes carrying one name form
one request (a rack's repair, a firmware rollout). The lifecycle controller
(``kilter serve --lifecycle``, the leader only) plans each request's domains
from the state it watches and runs its drain (``lifecycle.drain``) one round
per controller round, re-planning before every step from the jobs running
then, so work started since the request is weighed too. The settings (K,
step length, longest wait, eviction timeout, the qualification suite) are the
Configuration's ``lifecycle`` section.

Requests are carried out one at a time (one under way first, then in name
order), so that no more than K domains are ever out for them; a retired node
is left out of its request, which is then planned again without it. Progress is the drain's own, on the nodes,
under the plan id ``request:NAME``: a restart or a new leader resumes. A
stopped request is tried again every round (the cause may pass: a budget
allows the eviction, the burn-in is re-run) and says why once, in the log
and an Event on the node it stopped at. A node that completed a request
remembers it (``served`` in its progress, kept by every later drain), so a
finished request is never carried out again and costs no reads; its
annotation stays as a record, and maintenance again takes a new name.
Removing the annotation of a request under way stops it where it stands:
its nodes stay cordoned (or in ``maintenance``) for a person to finish.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from kilter.kube.api import ApiServer
from kilter.kube.events import EventRecorder, Involved
from kilter.lifecycle.drain import REQUEST_PLAN, Drain, DrainOutcome, DrainSettings
from kilter.lifecycle.plan_doc import PlanDoc, StepDoc, plan_document
from kilter.lifecycle.progress import MAINTENANCE, stored_progress
from kilter.lifecycle.replan import replan_step
from kilter.lifecycle.works import fleet_work
from kilter.model.annotations import LIFECYCLE
from kilter.model.errors import KilterError
from kilter.state.store import ClusterStore
from kilter.topology.maintenance import MaintenanceAsk, plan_maintenance

__all__ = ["MaintenanceRequests", "RequestSettings"]

log = logging.getLogger("kilter.lifecycle.maintenance")

MAX_NAME = 63
"""A request's name is at most a label value's length: it is shown in plan ids, logs and Events."""


@dataclass(frozen=True)
class RequestSettings:
    max_unavailable: int = 1
    step_s: float = 7200.0
    max_wait_s: float = 21600.0
    eviction_timeout_s: float = 600.0
    suite: str = ""


class MaintenanceRequests:
    """Every request on the nodes of ``store``, drained over ``api``; ``state`` says where each one stands."""

    def __init__(
        self,
        store: ClusterStore,
        api: ApiServer,
        settings: RequestSettings,
        *,
        events: EventRecorder | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.api = api
        self.settings = settings
        self.events = events
        self.wall = wall
        self.drains: dict[str, tuple[frozenset[str], Drain]] = {}
        self.state: dict[str, str] = {}  # request -> "running", "done" or "stopped: <why>"
        self.refused: list[str] = []  # requests ignored: a name no request may have

    def requests(self) -> dict[str, list[str]]:
        """Request name -> its GPU nodes still to serve it, by name (a retired node serves none: it is left out,
        and a request it was part of is planned again without it)."""
        out: dict[str, list[str]] = {}
        refused = []
        for name in self.store.fleet().node_names:
            node = self.store.node_named(name)
            request = node.metadata.annotations.get(MAINTENANCE, "").strip() if node is not None else ""
            if not request or node is None or node.metadata.labels.get(LIFECYCLE) == "retired":
                continue
            if len(request) > MAX_NAME or not request.isprintable():
                refused.append(f"{name}: {MAINTENANCE} must be a name of at most {MAX_NAME} printable characters")
                continue
            out.setdefault(request, []).append(name)
        for line in sorted(set(refused) - set(self.refused)):
            log.warning("maintenance request ignored: %s", line)
        self.refused = refused
        return out

    def round(self) -> dict[str, DrainOutcome | None]:
        """One drain round of the first request not finished yet (one under way first, else by name); its outcome
        (None: it goes on)."""
        out: dict[str, DrainOutcome | None] = {}
        asked = self.requests()
        for name in set(self.drains) - set(asked):
            del self.drains[name]
        for name in set(self.state) - set(asked):
            del self.state[name]
        pending = []
        for name, nodes in asked.items():
            if not self._unserved(name, nodes):
                self.drains.pop(name, None)
                self._record(name, DrainOutcome(True))
            else:
                pending.append((name, nodes))
        in_flight = self._in_flight()
        for name, nodes in sorted(pending, key=lambda item: (item[0] not in in_flight, item[0])):
            try:
                outcome = out[name] = self._drain(name, nodes).round()
            except KilterError as exc:  # the state cannot be planned from (a bad annotation, a kind unread)
                outcome = out[name] = DrainOutcome(False, None, f"not planned: {exc}")
            self._record(name, outcome)
            if outcome is None or not outcome.done:
                break  # one request at a time: the next waits until this one is done
        return out

    def _in_flight(self) -> set[str]:
        """The requests some node is part-way through (unfinished progress under ``request:NAME``)."""
        out = set()
        for name in self.store.fleet().node_names:
            progress = stored_progress(self.store, name)
            if progress is not None and progress.phase != "done" and progress.plan.startswith(REQUEST_PLAN):
                out.add(progress.plan.removeprefix(REQUEST_PLAN))
        return out

    def _unserved(self, name: str, nodes: list[str]) -> list[str]:
        """The request's nodes that have not completed it yet (read from the watched state: no API call)."""
        return [n for n in nodes if (p := stored_progress(self.store, n)) is None or name not in p.served]

    def counts(self) -> Counter[str]:
        return Counter(s.split(":", 1)[0] for s in self.state.values())

    def _drain(self, name: str, nodes: list[str]) -> Drain:
        wanted = frozenset(nodes)
        held = self.drains.get(name)
        if held is not None and held[0] == wanted:
            return held[1]
        plan = self._plan(name, nodes)

        def replan(domains: list[str], now_s: float) -> StepDoc:
            return replan_step(self.store, plan, domains, now_s)

        settings = DrainSettings(
            poll_s=0.0, eviction_timeout_s=self.settings.eviction_timeout_s, suite=self.settings.suite
        )
        drain = Drain(
            self.api,
            plan,
            device_resources=self.store.catalog.device_resources,
            settings=settings,
            signals=self.store.health,
            clock=self.wall,
            say=lambda line: log.info("maintenance %s: %s", name, line),
            replan=replan,
        )
        self.drains[name] = (wanted, drain)
        return drain

    def _plan(self, name: str, nodes: list[str]) -> PlanDoc:
        """The plan of the request's nodes that have not served it yet."""
        now = self.wall()
        work = fleet_work(self.store, now_s=now, nodes=self._unserved(name, nodes))
        s = self.settings
        ask = MaintenanceAsk(work.domain_gpus, now, s.step_s, s.max_unavailable, s.max_wait_s)
        doc = plan_document(plan_maintenance(ask, work.works), ask, work, created_s=now)
        return msgspec.structs.replace(doc, id=f"{REQUEST_PLAN}{name}")

    def _record(self, name: str, outcome: DrainOutcome | None) -> None:
        state = "running" if outcome is None else ("done" if outcome.done else f"stopped: {outcome.reason}")
        if self.state.get(name) == state:
            return
        self.state[name] = state
        if outcome is None:
            return
        if outcome.done:
            log.info("maintenance %s: every step done", name)
            return
        log.warning("maintenance %s stopped at step %s: %s", name, outcome.step, outcome.reason)
        stored = self.store.node_named(outcome.node) if outcome.node else None
        if self.events is not None and stored is not None:
            involved = Involved("v1", "Node", "", stored.metadata.name, stored.metadata.uid)
            self.events.record(involved, "KilterMaintenanceStopped", f"{name}: {outcome.reason}", warning=True)

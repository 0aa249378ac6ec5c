"""Running a maintenance plan: cordon, wait, evict, hand over to the maintenance tooling, re-qualify, a step at a time.

The drain is a reconciler: every round it reads the plan's nodes and the
pods on them from the API server and takes the next action each node's
progress allows. Progress lives on the nodes themselves, in the annotation
``kilter.dev/maintenance-progress`` (``{"plan": ID, "step": N, "phase": P,
"cordoned": B}``), so a drain killed at any point and started again (on any
machine) resumes where it stood. A node's phases:

``draining``
    cordoned (``cordoned``: by kilter; a node a person had cordoned is never
    uncordoned by it); its domain waits until its planned drain moment, or
    less when the jobs it waits for end first, then evicts every pod through
    the Eviction API (PodDisruptionBudgets honoured: a refused eviction is
    retried every round, for at most ``eviction_timeout_s``). DaemonSet and
    mirror pods stay, as ``kubectl drain`` leaves them.
``maintenance``
    no pod left: ``kilter.dev/lifecycle=maintenance``, for the maintenance
    tooling, which says it is done with ``kilter.dev/maintenance-done=true``.
``qualifying``
    ``kilter.dev/lifecycle=qualifying``, the last qualification result
    cleared: the burn-in tooling runs and sets ``kilter.dev/qualification``.
``done``
    passed and healthy: ``ready``, uncordoned if kilter cordoned it.

**Health gate.** A step begins only when every node of the steps before it
is done and healthy; the drain stops (and says why) when a node fails
qualification, comes back unhealthy, when a domain would evict a job the
plan did not list for it (a job that outlived its expected end, or one
that came since), when a budget refuses evictions for too long, or when the
plan's window has ended before a step began. Stopped is not failed: nothing
is undone, and running the drain again resumes once the cause is dealt
with (or with a new plan for what is left: a node's unfinished progress is
adopted by any plan that lists it).

Every write is a merge patch under the node's ``resourceVersion``: a node
changed since it was read (by a person, the lifecycle controller) is read
again next round, never overwritten. A dry run reads and says what the
next round would do, writing nothing.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import msgspec

from kilter.kube.api import MERGE_PATCH, ApiError, ApiServer, object_path
from kilter.lifecycle.evictions import Evictions, Refused, job_of, pods_to_move, transient
from kilter.lifecycle.plan_doc import DomainDoc, PlanDoc, StepDoc
from kilter.lifecycle.progress import MAINTENANCE_DONE, MAINTENANCE_PROGRESS, Progress, progress_of
from kilter.model.annotations import LIFECYCLE
from kilter.model.codec import convert
from kilter.model.core_v1 import Node
from kilter.model.errors import InputError
from kilter.quota.policy import parse_time
from kilter.topology.health import DEFAULTS, HealthSignals
from kilter.topology.lifecycle import QUALIFICATION, QUALIFICATION_SUITE, health_problem

__all__ = [
    "REQUEST_PLAN",
    "Drain",
    "DrainOutcome",
    "DrainSettings",
    "Replan",
]

REQUEST_PLAN = "request:"
"""The id prefix of a plan carrying out a maintenance request (``lifecycle.requests``)."""
FIELD_MANAGER = "kilter-maintenance"


@dataclass(frozen=True)
class DrainSettings:
    poll_s: float = 10.0
    eviction_timeout_s: float = 600.0
    suite: str = ""  # the qualification suite that must have passed ("" for any)
    dry_run: bool = False


@dataclass
class DrainOutcome:
    done: bool
    step: int | None = None  # the step it stopped at
    reason: str = ""
    actions: list[str] = field(default_factory=list)
    node: str | None = None  # the node it stopped at, when one is to blame


Replan = Callable[[list[str], float], StepDoc]
"""(domains left, now) -> the first step of a plan made now for them (``drain --replan``)."""


class _Stop(Exception):
    def __init__(self, step: int, reason: str, node: str | None = None) -> None:
        super().__init__(reason)
        self.step = step
        self.reason = reason
        self.node = node


class Drain:
    """One plan's drain over ``api``; ``run`` until done or stopped, ``round`` one pass (tests step it)."""

    def __init__(
        self,
        api: ApiServer,
        plan: PlanDoc,
        *,
        device_resources: Collection[str],
        settings: DrainSettings | None = None,
        signals: HealthSignals = DEFAULTS,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        say: Callable[[str], None] = print,
        replan: Replan | None = None,
    ) -> None:
        self.api = api
        self.plan = plan
        self.devices = sorted(device_resources)
        self.settings = settings or DrainSettings()
        self.signals = signals
        self.clock = clock
        self.sleep = sleep
        self.say = say
        self.actions: list[str] = []
        self.evictions = Evictions(api, self.settings.eviction_timeout_s)
        self.window_end = parse_time(plan.window_end, path="windowEnd") if plan.window_end else None
        self.evicted_by: dict[int, set[str]] = {}  # step -> the jobs its step and those before evict (anywhere)
        evicted: set[str] = set()
        for step in plan.steps:
            evicted |= {e.job for d in step.domains for e in d.evicts}
            self.evicted_by[step.step] = set(evicted)
        self.said: set[str] = set()
        self.replan = replan
        self.current: dict[str, tuple[int, DomainDoc]] = {}  # domain -> (step, its drain) as begun in this process
        self.evicted: set[str] = set()  # the jobs the steps begun in this process evict
        self.stopped = ""  # the last stop said (a stop that stands is said once, not every round)
        self.request = plan.id.removeprefix(REQUEST_PLAN) if plan.id.startswith(REQUEST_PLAN) else None
        self.failed_read = ""

    def run(self) -> DrainOutcome:
        while True:
            outcome = self.round()
            if outcome is not None:
                return outcome
            self.sleep(self.settings.poll_s)

    def round(self) -> DrainOutcome | None:
        """One pass: the next actions, written (or, in a dry run, only said); an outcome when done or stopped.

        Domains already begun go on first (after a restart too: the nodes say which); only when none is in
        flight and every finished domain is healthy does the next step begin."""
        try:
            nodes = {n: self._node(n) for n in self.plan.all_nodes()}
            order = [d for s in self.plan.steps for d in s.domains]
            done = [d for d in order if all(self._done(nodes[n]) for n in d.nodes)]
            flying = self._flying(order, done, nodes)
            step = None
            if not flying:
                for d in done:  # the health gate: what is back must still be healthy before anything else begins
                    self._healthy(d, nodes)
                left = [d for d in order if d not in done]
                if not left:
                    return DrainOutcome(True, None, "every step done", self.actions)
                step = self._next_step(left, nodes)
                if step is None:
                    return (
                        DrainOutcome(False, None, "dry run: nothing written", self.actions)
                        if self.settings.dry_run
                        else None
                    )
                flying = [d.domain for d in step.domains]
            for domain in flying:
                self._advance(self._doc(domain, nodes), nodes)
            if self.settings.dry_run:
                return DrainOutcome(False, step.step if step else None, "dry run: nothing written", self.actions)
            return None
        except _Stop as stop:
            if stop.reason != self.stopped:
                self.stopped = stop.reason
                self.say(f"stopped at step {stop.step}: {stop.reason}")
            return DrainOutcome(False, stop.step, stop.reason, self.actions, stop.node)
        except ApiError as exc:  # a read failed (the server restarting, the network): the next round reads again
            if str(exc) != self.failed_read:
                self.failed_read = str(exc)
                self.say(f"a read failed, trying again: {exc}")
            return DrainOutcome(False, None, f"not read: {exc}", self.actions) if self.settings.dry_run else None

    def _flying(self, order: list[DomainDoc], done: list[DomainDoc], nodes: dict[str, dict[str, Any]]) -> list[str]:
        """The domains begun and not done (after a restart, as the nodes say); following the plan as written, the
        rest of their steps too, so that a crash between two domains of a step does not split it."""
        begun = {d.domain for d in order if d not in done and any(self._mine(nodes[n]) for n in d.nodes)}
        if self.replan is None:
            for step in self.plan.steps:
                if any(d.domain in begun for d in step.domains):
                    begun |= {d.domain for d in step.domains if d not in done}
        return [d.domain for d in order if d.domain in begun]

    def _next_step(self, left: list[DomainDoc], nodes: dict[str, dict[str, Any]]) -> StepDoc | None:
        """The step to begin now: the plan's next (its domains not yet done) once its planned beginning has come
        (None before: the plan's timing is what it weighed, jobs it expected to have ended by then included), or,
        re-planning, the first step of a plan made now for the domains left; refused once the window has ended."""
        now = self.clock()
        index = 1 + max((p.step for n in nodes.values() if (p := self._mine(n, done_too=True))), default=-1)
        if self.window_end is not None and now > self.window_end:
            raise _Stop(index, f"the plan's window ended at {self.plan.window_end}: plan again for the next one")
        if self.replan is not None:
            step = self.replan([d.domain for d in left], now)
            step = msgspec.structs.replace(step, step=index)
        else:
            names = {d.domain for d in left}
            first = next(s for s in self.plan.steps if any(d.domain in names for d in s.domains))
            if now < parse_time(first.begin, path=f"steps[{first.step}].begin") - 1:  # times are whole seconds
                self._act(f"wait until {first.begin} to begin step {first.step}, as planned", write=False)
                return None
            step = msgspec.structs.replace(first, domains=[d for d in first.domains if d.domain in names])
        for d in step.domains:
            self.current[d.domain] = (step.step, d)
            self.evicted |= {e.job for e in d.evicts}
        return step

    def _doc(self, domain: str, nodes: dict[str, dict[str, Any]]) -> DomainDoc:
        """What the drain of ``domain`` waits for and evicts: as begun in this process, else (after a restart)
        as the plan says, or as a plan made now says, re-planning (at the step its nodes record)."""
        if domain not in self.current:
            if self.replan is not None:
                step = self.replan([domain], self.clock())
                (doc,) = step.domains
                self.evicted |= {e.job for e in doc.evicts}
                recorded = [p.step for n in doc.nodes if (p := self._mine(nodes[n])) is not None]
                self.current[domain] = (max(recorded, default=self._step_of(domain)), doc)
            else:
                doc = next(d for s in self.plan.steps for d in s.domains if d.domain == domain)
                self.current[domain] = (self._step_of(domain), doc)
        return self.current[domain][1]

    def _step_of(self, domain: str) -> int:
        return next(s.step for s in self.plan.steps for d in s.domains if d.domain == domain)

    # the reads

    def _node(self, name: str) -> dict[str, Any]:
        try:
            node = self.api.call("GET", object_path("/api/v1", "nodes", name))
        except ApiError as exc:
            if exc.code not in (403, 404):
                raise  # read again next round
            step = next(s.step for s in self.plan.steps for d in s.domains if name in d.nodes)
            raise _Stop(step, f"node {name}: {exc}", name) from exc
        if not isinstance(node, dict):
            raise InputError(f"node {name}: the API server answered no object")
        return node

    def _done(self, node: dict[str, Any]) -> bool:
        """Finished under this plan, or (a request's drain) having completed the request under any plan."""
        p = progress_of(node)
        return p is not None and p.phase == "done" and (p.plan == self.plan.id or self.request in p.served)

    def _healthy(self, d: DomainDoc, nodes: dict[str, dict[str, Any]]) -> None:
        """The health gate: a maintained node must still be healthy before anything else begins."""
        for name in d.nodes:
            problem = self._problem(nodes[name])
            if problem is not None:
                step = (progress_of(nodes[name]) or Progress("", -1, "", False)).step
                raise _Stop(step, f"node {name} was maintained but is unhealthy now: {problem}", name)

    def _problem(self, node: dict[str, Any]) -> str | None:
        typed = convert(node, Node, path=f"node {(node.get('metadata') or {}).get('name')}")
        problem = health_problem(typed, self.signals)
        state = typed.metadata.labels.get(LIFECYCLE, "")
        return problem or (f"its lifecycle is {state}" if state not in ("", "ready") else None)

    # the step

    def _advance(self, d: DomainDoc, nodes: dict[str, dict[str, Any]]) -> None:
        """The next action for each node of domain ``d``, by its phase."""
        now = self.clock()
        step = self.current[d.domain][0]  # ``_doc`` put it there
        for name in d.nodes:
            if self._mine(nodes[name]) is None and not self._done(nodes[name]):
                self._begin(step, name, nodes[name])
        if any(self._phase(nodes[n]) == "" for n in d.nodes):
            return  # a cordon not written yet (changed meanwhile): nothing is evicted until the whole domain is
        draining = [n for n in d.nodes if self._phase(nodes[n]) == "draining"]
        if draining:
            self._drain(step, d, draining, nodes, now)
        for name in d.nodes:
            p = self._mine(nodes[name])
            if p is not None and p.phase == "maintenance":
                self._maintained(step, name, nodes[name], p)
            elif p is not None and p.phase == "qualifying":
                self._qualified(step, name, nodes[name], p)

    def _phase(self, node: dict[str, Any]) -> str:
        """The node's phase under this plan ("done" once finished); a dry run takes a node it would have cordoned
        as draining."""
        if self._done(node):
            return "done"
        p = self._mine(node)
        return p.phase if p is not None else ("draining" if self.settings.dry_run else "")

    def _mine(self, node: dict[str, Any], *, done_too: bool = False) -> Progress | None:
        """The node's unfinished progress this plan goes on from, its own or another plan's (adopted); with
        ``done_too``, this plan's finished progress as well."""
        p = progress_of(node)
        if p is None or (p.phase == "done" and not (done_too and p.plan == self.plan.id)):
            return None
        return p

    def _begin(self, step: int, name: str, node: dict[str, Any]) -> None:
        if ((node.get("metadata") or {}).get("labels") or {}).get(LIFECYCLE) == "retired":
            raise _Stop(step, f"node {name} was retired since the plan was made: plan again without it", name)
        already = bool((node.get("spec") or {}).get("unschedulable"))
        progress = Progress(self.plan.id, step, "draining", cordoned=not already)
        self._patch(node, f"cordon {name} (step {step})", progress, spec={"unschedulable": True})

    def _drain(
        self, step: int, d: DomainDoc, draining: list[str], nodes: dict[str, dict[str, Any]], now: float
    ) -> None:
        pods = {name: pods_to_move(self.api, name) for name in draining}
        jobs = {job for ps in pods.values() for p in ps if (job := job_of(p, self.devices)) is not None}
        drain_at = parse_time(d.drain, path=f"steps[{step}].{d.domain}.drain")
        waiting = sorted(jobs & set(d.waits_for))
        if waiting and now < drain_at:
            self._act(f"wait for {', '.join(waiting)} on {d.domain} until {d.drain}", write=False)
            return
        guarded = [(e.job, e.not_before) for e in d.evicts if e.job in jobs and e.not_before]
        held = [(job, t) for job, t in guarded if t and now < parse_time(t, path=f"{d.domain}.evicts.notBefore")]
        if held:
            until = max(t for _, t in held)
            self._act(f"wait for the min-runtime of {', '.join(j for j, _ in held)} until {until}", write=False)
            return
        allowed = {e.job for e in d.evicts} | self.evicted
        if self.replan is None:
            allowed |= self.evicted_by.get(self._step_of(d.domain), set())
        unplanned = sorted(jobs - allowed)
        if unplanned:
            raise _Stop(
                step,
                f"domain {d.domain} would evict {', '.join(unplanned)}, which the plan did not list for it "
                "(it outlived its expected end, or came since): plan again, or end it first",
            )
        for name in draining:
            if pods[name]:
                for pod in pods[name]:
                    self._evict(step, pod, now)
            elif (p := self._mine(nodes[name])) is not None:
                progress = dataclasses.replace(p, phase="maintenance")
                self._patch(nodes[name], f"hand {name} to maintenance", progress, labels={LIFECYCLE: "maintenance"})

    def _evict(self, step: int, pod: dict[str, Any], now: float) -> None:
        meta = pod.get("metadata") or {}
        try:
            if self.evictions.terminating(pod, now):
                return
            if not self._act(f"evict pod {meta.get('namespace')}/{meta.get('name')}"):
                return
            answer = self.evictions.evict(pod, now)
        except Refused as refused:
            raise _Stop(step, refused.reason, refused.node) from refused
        if answer:
            self._act(f"eviction of {meta.get('namespace')}/{meta.get('name')} refused, retried: {answer}", write=False)

    def _maintained(self, step: int, name: str, node: dict[str, Any], p: Progress) -> None:
        labels = (node.get("metadata") or {}).get("labels") or {}
        if labels.get(MAINTENANCE_DONE) != "true":
            return
        cleared: dict[str, str | None] = {
            LIFECYCLE: "qualifying",
            MAINTENANCE_DONE: None,
            QUALIFICATION: None,
            QUALIFICATION_SUITE: None,
        }
        self._patch(node, f"re-qualify {name}", dataclasses.replace(p, phase="qualifying"), labels=cleared)

    def _qualified(self, step: int, name: str, node: dict[str, Any], p: Progress) -> None:
        labels = (node.get("metadata") or {}).get("labels") or {}
        state, result, suite = labels.get(LIFECYCLE, ""), labels.get(QUALIFICATION), labels.get(QUALIFICATION_SUITE)
        if self.settings.suite and suite != self.settings.suite:
            return  # only the suite asked for passes a node, even one the lifecycle controller made ready
        if result == "failed" or state == "repairing":
            raise _Stop(step, f"node {name} failed qualification ({suite or 'no suite named'})", name)
        if result != "passed" and state != "ready":
            return
        problem = health_problem(convert(node, Node, path=f"node {name}"), self.signals)
        if problem is not None:
            raise _Stop(step, f"node {name} passed qualification but is unhealthy: {problem}", name)
        spec = {"unschedulable": False} if p.cordoned else None
        self._patch(
            node,
            f"return {name} to service",
            dataclasses.replace(p, phase="done"),
            labels={LIFECYCLE: "ready"},
            spec=spec,
        )

    # the writes

    def _act(self, action: str, *, write: bool = True) -> bool:
        """Say an action; whether to carry it out (not in a dry run)."""
        if action not in self.said:  # a wait or a refused eviction is said once, not every round
            self.said.add(action)
            self.actions.append(action)
            self.say(f"would {action}" if self.settings.dry_run else action)
        return write and not self.settings.dry_run

    def _patch(
        self,
        node: dict[str, Any],
        action: str,
        progress: Progress,
        *,
        labels: dict[str, str | None] | None = None,
        spec: dict[str, Any] | None = None,
    ) -> None:
        """One merge patch of the node under the resourceVersion it was read at; the copy in hand is updated
        from the answer, so the round goes on from what was written. A conflict waits for the next round."""
        if not self._act(action):
            return
        meta = node.get("metadata") or {}
        served = (progress_of(node) or progress).served  # every request the node completed, kept by every plan
        request = self.request
        if progress.phase == "done" and request is not None and request not in served:
            served = (*served, request)
        progress = dataclasses.replace(progress, plan=self.plan.id, served=served)  # adopted progress is this plan's
        body: dict[str, Any] = {
            "metadata": {
                "resourceVersion": meta.get("resourceVersion"),
                "annotations": {MAINTENANCE_PROGRESS: progress.encode()},
                **({"labels": labels} if labels else {}),
            }
        }
        if spec is not None:
            body["spec"] = spec
        path = object_path("/api/v1", "nodes", meta.get("name") or "")
        try:
            answer = self.api.call("PATCH", f"{path}?fieldManager={FIELD_MANAGER}", body, content_type=MERGE_PATCH)
        except ApiError as exc:
            if exc.code == 409:
                self.say(f"{meta.get('name')} changed meanwhile: read again next round")
                return
            if transient(exc.code):
                self.say(f"{meta.get('name')} not written, trying again: {exc}")
                return
            raise _Stop(progress.step, f"node {meta.get('name')} not written: {exc}", meta.get("name")) from exc
        if isinstance(answer, dict):
            node.clear()
            node.update(answer)

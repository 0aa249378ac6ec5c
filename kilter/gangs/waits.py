"""Rent or buy in the servers: whether a preferred gang holds off now, for room in fewer scale-up domains.

``topology.split_wait`` is the rule; this module gives it what a cluster
knows of one gang, the same for every path that places one (the extender's
filter and Volcano's predicate through the gang book, the AdmissionCheck,
``kilter plan``):

* the gang: every GPU pod set *preferred* (none required, none
  unconstrained), more than one pod, and a plan spread over more domains
  than the fewest the idle fleet could hold it in (``fewest_domains_idle``
  for the plan's platform). Any other gang never waits;
* the rule: ``wait_settings`` (job, ClusterQueue, Cohorts, flags);
* its expected runtime, first found of: ``kilter.dev/expected-runtime``
  (job), ``kueue.x-k8s.io/max-exec-time-seconds`` (a job's label, or the
  Workload's ``spec.maximumExecutionTimeSeconds`` Kueue copies it to), the
  pod's or Job's ``activeDeadlineSeconds``; else the median runtime of its
  ClusterQueue's finished Workloads of its size class (``learned``; Volcano
  gangs have none). No estimate: no wait;
* how long it has waited: now minus the clock's start (``JobFacts.since_s``),
  read from the objects so replicas and restarts agree without keeping
  anything. A Workload's clock starts when Kueue reserved its quota (the
  ``QuotaReserved`` condition's ``lastTransitionTime`` while it is ``True``),
  else at its ``creationTimestamp``; a PodGroup's at its
  ``creationTimestamp`` (Volcano keeps ``Inqueue`` as a bare
  ``status.phase`` with no time, and rewrites its conditions'
  ``lastTransitionTime`` every session, so nothing marks when it was
  enqueued); a gang of bare pods at the earliest of its pods' that the state
  holds. A gang whose clock kilter cannot read never waits: its budget
  could never run out.

* what the split costs the queue (``queue_load``): the jobs the cluster's
  Workloads and PodGroups show waiting over the recent past as long as the
  gang's expected run, its own wait left out. While they have queued all
  along, the wait has no end short of room in its fewest domains (the
  AdmissionCheck then answers ``Retry``: the quota goes back to the queue).

What a waiting gang holds: no nodes (no GPUs reserved, no plan record), but
a Workload keeps its ClusterQueue's quota, since the AdmissionCheck answers
``Pending`` and not ``Retry``. A gang that gives its quota back while it waits
lets the jobs behind it take the room it waits for, and waits in vain: on
the whole Philly trace (40 racks, default slowdowns, learned runtimes) the
rule made mean JCT worse, 108,490 s against 88,696 s without it, when a
waiting gang held nothing and its budget counted from submission, and cut it
to 20,060 s when the gang kept its quota and the budget counted from the
reservation (``docs/sim/split-wait-study.md``). That is why the clock starts
at the reservation: from then on the gang blocks its queue's quota, and the
budget bounds that. A Workload evicted and admitted again starts again.

A decision says for how long (``remaining_s``, and ``until_s``, the moment
the budget runs out) and why (``reason``, the one sentence every path shows;
``standing``, the same with the moment in place of the time left).
``SplitWaits`` keeps the inputs that change with the state (settings per
version, the learner per Workload change) and counts the gangs waiting now
(``kilter_gangs_waiting_for_domains``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kilter.gangs.identity import GangId, GangKey, in_gang
from kilter.gangs.learned import LearnedRuntimes, learner_of
from kilter.gangs.queue_load import backlog_of, usable_gpus
from kilter.gangs.wait_settings import QueueWaitRules
from kilter.model.core_v1 import Pod, PodTemplateSpec
from kilter.model.errors import InputError
from kilter.model.kueue import KUEUE_GROUP, ClusterQueue, Cohort, ResourceFlavor, true_condition
from kilter.quota.policy import read_time
from kilter.quota.runtimes import MAX_EXEC_TIME, WINDOW, declared_runtime
from kilter.state.cluster import ClusterState
from kilter.state.store import ClusterStore
from kilter.topology.backlog import Backlog
from kilter.topology.fleet import Fleet
from kilter.topology.plan import GangRequest, Plan
from kilter.topology.split_wait import (
    QueueLoad,
    SplitWait,
    WaitDecision,
    decide,
    fewest_domains_idle,
    room_may_come,
)

__all__ = [
    "NO_WAIT",
    "JobFacts",
    "Learned",
    "SplitWaits",
    "Waits",
    "expected_runtime",
    "facts_of",
    "fewest_domains",
    "judge",
    "might_wait",
]

log = logging.getLogger("kilter.gangs")

NO_WAIT = WaitDecision(False)
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
Learned = Callable[[str, int], float | None]  # (ClusterQueue, GPUs) -> learned runtime in seconds, or None


@dataclass(frozen=True)
class JobFacts:
    """What the rule reads of a gang's job: its own annotations and labels first, then its pods' (templates')."""

    where: str  # "Workload ml/wl": where a bad annotation is, in a refusal
    annotations: Mapping[str, str]
    labels: Mapping[str, str]
    active_deadline_s: float | None
    since_s: float | None  # Unix seconds the budget counts from (module docstring); None when kilter cannot tell
    cluster_queue: str | None
    learned: bool  # whether the queue's finished Workloads tell its runtime (Kueue, not Volcano)
    waited: tuple[float, float | None] | None = None  # its own wait in the backlog (``queue_load``), if any


def might_wait(request: GangRequest, plan: Plan) -> bool:
    """The cheap test first: a feasible plan over two domains or more, of a preferred gang of two pods or more."""
    pods = sum(ps.count for ps in request.pod_sets)
    preferred = all(ps.topology.required is None and not ps.topology.unconstrained for ps in request.pod_sets)
    return plan.feasible and len(plan.domains) > 1 and pods > 1 and preferred


def fewest_domains(request: GangRequest, plan: Plan, fleet: Fleet) -> int:
    """The fewest domains the idle fleet could hold the gang in, when its plan spans more and a job running on its
    platform may end and make room (``room_may_come``; else 0: nothing to wait for); the cheap half of the rule,
    asked before anything is read of the gang's job."""
    if not might_wait(request, plan):
        return 0
    index = next((i for i, p in enumerate(fleet.platforms) if p.name == plan.platform), None)
    if index is None or not room_may_come(fleet, index):
        return 0
    shapes = tuple((ps.count, ps.gpus_per_pod) for ps in request.pod_sets)
    least = fewest_domains_idle(fleet, index, shapes)
    return least if 0 < least < len(plan.domains) else 0


def judge(
    settings: QueueWaitRules,
    facts: JobFacts,
    request: GangRequest,
    plan: Plan,
    *,
    least: int,
    now_s: float,
    learned: Learned | None,
    backlog: Backlog | None = None,
    usable_gpus: int = 0,
) -> WaitDecision:
    """Whether a gang whose plan spans more than the ``least`` domains it could have waits now (see the module
    docstring); ``InputError`` for a bad annotation of its job. ``backlog`` (the cluster's, ``queue_load``) and
    the platform's ``usable_gpus`` price the split by what it takes from the queue too."""
    rule = settings.for_job(facts.cluster_queue, facts.annotations, path=facts.where)
    if not rule.enabled:
        return NO_WAIT
    runtime = expected_runtime(facts, sum(ps.count * ps.gpus_per_pod for ps in request.pod_sets), learned)
    if runtime is None or facts.since_s is None:
        return NO_WAIT
    load = None
    if backlog is not None and facts.waited is not None:
        load = QueueLoad(backlog.mean_of_others(now_s, runtime, *facts.waited), usable_gpus)
    return decide(
        rule,
        domains_now=len(plan.domains),
        domains_min=least,
        expected_runtime_s=runtime,
        waited_s=now_s - facts.since_s,
        started_s=facts.since_s,
        load=load,
        gpus=sum(ps.count * ps.gpus_per_pod for ps in request.pod_sets),
    )


def expected_runtime(facts: JobFacts, gpus: int, learned: Learned | None) -> float | None:
    """Seconds a gang of ``gpus`` GPUs is expected to run: what its job declares (``declared_runtime``), else the
    median its ClusterQueue's finished Workloads of its size took (Kueue gangs only); None when neither tells.
    ``InputError`` for a declared runtime that does not read."""
    runtime = declared_runtime(facts.annotations, facts.labels, facts.active_deadline_s, path=facts.where)
    if runtime is None and learned is not None and facts.learned and facts.cluster_queue:
        runtime = learned(facts.cluster_queue, gpus)
    return runtime


def facts_of(
    kind: str,
    namespace: str,
    name: str,
    obj: Mapping[str, Any] | None,
    pods: Sequence[Pod | PodTemplateSpec],
    settings: QueueWaitRules,
) -> JobFacts:
    """The facts of a job ``obj`` (a Workload, PodGroup or job kind, as received; None for a gang of bare pods) and
    its ``pods`` (or pod templates), in that order of precedence."""
    meta, spec, status = (_part(obj, k) for k in ("metadata", "spec", "status"))
    notes, labels = dict(_strings(meta.get("annotations"))), dict(_strings(meta.get("labels")))
    deadline = _seconds(spec.get("activeDeadlineSeconds"))
    most = _seconds(spec.get("maximumExecutionTimeSeconds"))
    if most is not None:
        labels.setdefault(MAX_EXEC_TIME, str(int(most)))
    since = read_time(meta.get("creationTimestamp")) if obj is not None else None
    waited: tuple[float, float | None] | None = None if since is None else (since, None)
    if kind == "Workload":
        reserved = _reserved_at(status)
        waited = None if since is None else (since, reserved)
        since = since if reserved is None else reserved
    for pod in pods:
        for key, value in pod.metadata.annotations.items():
            notes.setdefault(key, value)
        for key, value in pod.metadata.labels.items():
            labels.setdefault(key, value)
        if deadline is None and pod.spec.active_deadline_seconds:
            deadline = float(pod.spec.active_deadline_seconds)
        if obj is None:
            stamp = read_time(pod.metadata.creation_timestamp)
            since = stamp if since is None or (stamp is not None and stamp < since) else since
            waited = None if since is None else (since, None)
    if kind == "Workload":
        admission = _part(status, "admission")
        admitted = admission.get("clusterQueue")
        queue = admitted if isinstance(admitted, str) and admitted else None
        cq = queue or settings.cluster_queue_of(namespace, _string(spec.get("queueName")))
    elif kind == "PodGroup":
        cq = settings.volcano_queues.get(_string(spec.get("queue")) or "default")
    else:
        cq = settings.cluster_queue_of(namespace, labels.get(QUEUE_LABEL))
    return JobFacts(f"{kind} {namespace}/{name}", notes, labels, deadline, since, cq, kind != "PodGroup", waited)


class Waits:
    """The rule over one state: ``settings`` and ``learned`` as they are now, ``clock`` Unix seconds."""

    def __init__(
        self,
        settings: Callable[[], QueueWaitRules],
        learned: Learned | None,
        clock: Callable[[], float],
        backlog: Callable[[], Backlog | None] = lambda: None,
    ) -> None:
        self.settings = settings
        self.learned = learned
        self.clock = clock
        self.backlog = backlog

    @classmethod
    def of_state(cls, state: ClusterState, defaults: SplitWait, *, now_s: float, window: int = WINDOW) -> Waits:
        """What a command judges with: ``state`` read once, its finished Workloads learned from (the last
        ``window`` of each size class, as the server that answers a view learns) and its waiting ones priced by
        (``queue_load``), at ``now_s``."""
        settings = QueueWaitRules.build(state, defaults)
        learner = learner_of(state.workloads, state.catalog.device_resources, window=window)
        backlog = backlog_of(state)
        return cls(lambda: settings, learner.estimate, lambda: now_s, lambda: backlog)

    def _judge(self, facts: JobFacts, request: GangRequest, plan: Plan, fleet: Fleet, least: int) -> WaitDecision:
        """``judge`` with what this state knows: its settings, learned runtimes, clock and backlog."""
        return judge(
            self.settings(),
            facts,
            request,
            plan,
            least=least,
            now_s=self.clock(),
            learned=self.learned,
            backlog=self.backlog(),
            usable_gpus=usable_gpus(fleet, plan.platform),
        )

    def for_object(
        self,
        obj: Mapping[str, Any],
        pods: Sequence[Pod | PodTemplateSpec],
        request: GangRequest,
        plan: Plan,
        fleet: Fleet,
        *,
        created_s: float | None = None,
    ) -> WaitDecision:
        """The decision for a job object (a Workload for the AdmissionCheck, any job for ``kilter plan``);
        ``created_s`` stands in for a clock start the object does not carry (a manifest not yet created)."""
        meta = _part(obj, "metadata")
        kind, ns, name = _string(obj.get("kind")) or "Job", _string(meta.get("namespace")), _string(meta.get("name"))
        decision = NO_WAIT
        least = fewest_domains(request, plan, fleet)
        if least:
            facts = facts_of(kind, ns or "", name or "", obj, pods, self.settings())
            if facts.since_s is None and created_s is not None:
                facts = dataclasses.replace(facts, since_s=created_s)
            decision = self._judge(facts, request, plan, fleet, least)
        if kind == "Workload":
            self.record(GangKey(ns or "", "workload", (name or "",)).format(), decision)
        return decision

    def record(self, gang: str, decision: WaitDecision) -> None:
        """Told of every decision on a gang (``SplitWaits`` counts those waiting)."""


class SplitWaits(Waits):
    """The rule over a live store, for the gang book and the AdmissionCheck controller (see the module docstring).

    ``wall`` is Unix time, the clock creation times are read against; tests inject it.
    """

    def __init__(
        self,
        store: ClusterStore,
        *,
        defaults: SplitWait | None = None,
        wall: Callable[[], float] = time.time,
        queues: Iterable[ClusterQueue | Cohort | ResourceFlavor] = (),
        runtime_window: int = WINDOW,
    ) -> None:
        self.store = store
        self.defaults = defaults or SplitWait()
        self.runtimes = LearnedRuntimes(store, window=runtime_window)
        self._queues = list(queues)
        self._settings: tuple[int, QueueWaitRules] | None = None
        self._logged: frozenset[str] = frozenset()
        self._waiting: dict[str, float] = {}  # gang key -> Unix time its budget runs out
        self._backlog: tuple[int, Backlog] | None = None
        super().__init__(self._current, self.runtimes.estimate, wall, self._current_backlog)

    def _current_backlog(self) -> Backlog:
        """The backlog of the state's version (``queue_load``), read once per version."""
        if self._backlog is None or self._backlog[0] != self.store.version:
            self._backlog = (self.store.version, backlog_of(self.store.state()))
        return self._backlog[1]

    def set_defaults(self, defaults: SplitWait) -> None:
        """Use ``defaults`` where nothing in the cluster sets a rule (``kilter serve --config`` reloaded)."""
        self.defaults = defaults
        self._settings = None

    def _current(self) -> QueueWaitRules:
        """The settings of the state's version, worked out once per version; new problems logged once."""
        if self._settings is None or self._settings[0] != self.store.version:
            settings = QueueWaitRules.build(self.store.state(), self.defaults, extra=self._queues)
            for line in sorted(set(settings.problems) - self._logged):
                log.warning("%s", line)
            self._logged = frozenset(settings.problems)
            self._settings = (self.store.version, settings)
        return self._settings[1]

    def problems(self) -> list[str]:
        """Bad split-wait annotations on ClusterQueues and Cohorts, one line each (``/readyz``)."""
        return list(self._current().problems)

    def for_gang(self, gang: GangId, pod: Pod, request: GangRequest, plan: Plan) -> WaitDecision:
        """The decision for a gang the book just planned, from what the state holds of it (``pod`` counts only
        when the state holds it: a body alone does not make a gang wait)."""
        least = fewest_domains(request, plan, self.store.fleet())
        if not least:
            self.record(gang.key, NO_WAIT)
            return NO_WAIT
        facts = self._facts(gang, pod)
        if facts is None:
            return NO_WAIT
        decision = self._judge(facts, request, plan, self.store.fleet(), least)
        self.record(gang.key, decision)
        return decision

    def runtime_of(self, gang: GangId, pod: Pod, request: GangRequest) -> float | None:
        """Seconds the gang is expected to run (``expected_runtime`` of what the state holds of it); None when
        nothing tells, or its annotation does not read (the split wait says so where it matters)."""
        facts = self._facts(gang, pod)
        if facts is None:
            return None
        try:
            return expected_runtime(facts, sum(ps.count * ps.gpus_per_pod for ps in request.pod_sets), self.learned)
        except InputError:
            return None

    def _facts(self, gang: GangId, pod: Pod) -> JobFacts | None:
        """The facts of the gang's job, its members and ``pod`` as the state holds them; None for a bad key."""
        try:
            key = GangKey.parse(gang.key)
        except InputError:
            return None
        members = {p.metadata.uid: p for p in in_gang(key).members(self.store)}
        held = self.store.pod_named(pod.metadata.namespace, pod.metadata.name)
        if held is not None and held.metadata.uid == pod.metadata.uid:
            members.setdefault(held.metadata.uid, held)
        pods = sorted(members.values(), key=lambda p: p.metadata.name)
        owner = _OWNERS.get(key.kind)
        obj = self.store.get(owner[0], owner[1], key.namespace, key.name) if owner else None
        kind = owner[1] if owner and obj is not None else "pods of gang"
        return facts_of(kind, key.namespace, key.name, obj, pods, self.settings())

    def record(self, gang: str, decision: WaitDecision) -> None:
        if decision.wait:
            self._waiting[gang] = self.clock() + decision.remaining_s
        else:
            self._waiting.pop(gang, None)

    def waiting(self) -> int:
        """Gangs waiting for fewer domains now: their budget not spent, and the state still shows them."""
        now = self.clock()
        for gang in [g for g, until in self._waiting.items() if until <= now or not self._still_there(g)]:
            del self._waiting[gang]
        return len(self._waiting)

    def _still_there(self, gang: str) -> bool:
        try:
            key = GangKey.parse(gang)
        except InputError:
            return False
        owner = _OWNERS.get(key.kind)
        if owner is not None and self.store.get(owner[0], owner[1], key.namespace, key.name) is not None:
            return True
        return any(not p.spec.node_name for p in in_gang(key).members(self.store))


_OWNERS = {"workload": (KUEUE_GROUP, "Workload"), "podgroup": ("scheduling.volcano.sh", "PodGroup")}


def _part(obj: Mapping[str, Any] | None, key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _strings(value: Any) -> Iterable[tuple[str, str]]:
    if isinstance(value, Mapping):
        yield from ((k, v) for k, v in value.items() if isinstance(k, str) and isinstance(v, str))


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def _reserved_at(status: Mapping[str, Any]) -> float | None:
    """When Kueue reserved a Workload's quota: its ``QuotaReserved`` condition's ``lastTransitionTime`` while the
    condition is ``True`` (stamped each time it turns True: Kueue's ``workload.SetQuotaReservation`` through
    ``apimeta.SetStatusCondition``); else None."""
    cond = true_condition(status, "QuotaReserved")
    return None if cond is None else read_time(cond.get("lastTransitionTime"))

"""When each pending gang is expected to start, and on which domains: ``squeue --start`` for a Kubernetes cluster.

Derived from the cluster's objects alone, at ``now``: nothing is kept, so
every replica and a restarted kilter give the same answer for the same
state. Three steps:

* **holdings**: every bound GPU pod that has not ended, grouped by its gang
  (``identity.key_of``; a pod of no gang is its own), holding its GPUs (the
  pod GPU reader's count) on its node until ``reservations.expected_end``.
  A gang started when its Workload was admitted (the ``Admitted``
  condition's ``lastTransitionTime``), else at its pods' earliest
  ``status.startTime``, else their earliest ``creationTimestamp``; it runs
  for what its job declares, else what its ClusterQueue's finished
  Workloads of its size took (``waits.expected_runtime``, the very reading
  the split wait uses). Without an estimate it never ends, so nothing is
  promised on its GPUs;
* **pending gangs in queue order**: Workloads not admitted (those holding
  quota first, being closest to running; then priority, high first, then
  creation, as Kueue's BestEffortFIFO orders its heads), Volcano PodGroups
  ``Pending`` or ``Inqueue`` and gangs of bare pods not yet bound (by
  creation), each with its pod sets and the domains it may take: 1 for a
  gang that requires one domain, every domain for an unconstrained one,
  else the fewest the idle fleet could hold it in
  (``split_wait.fewest_domains_idle``, what it waits for);
* **reservations**, gang after gang in that order, each by
  ``reservations.earliest_start`` around every earlier one's claim.

Conservative on purpose, as ``squeue --start`` is: every pending gang is
shown the start it would get were every gang ahead of it to run as
estimated, so users see when theirs comes, not only the head's. A gang with
no start shows why: a job annotation that does not read (its error, and the
other gangs still get theirs), a shape the idle fleet cannot hold, or room
that only jobs with no expected end could free. Topology only: quota is
Kueue's, and a gang its quota holds back starts no earlier than shown.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from kilter.gangs.identity import GangKey, key_of
from kilter.gangs.learned import learner_of
from kilter.gangs.wait_settings import QueueWaitRules
from kilter.gangs.waits import Learned, expected_runtime, facts_of
from kilter.model.core_v1 import Pod, PodTemplateSpec
from kilter.model.errors import InputError
from kilter.model.jobs import PodSetSpec, read_job
from kilter.model.kueue import KUEUE_GROUP, Workload
from kilter.quota.policy import parse_time
from kilter.quota.usage import workload_infos
from kilter.state.cluster import ClusterState
from kilter.state.store import ClusterStore
from kilter.topology import pod_gpus
from kilter.topology.fleet import ENDED_PHASES, Fleet
from kilter.topology.plan import GangRequest, gang_request
from kilter.topology.reservations import (
    Holding,
    Holdings,
    NodeSpace,
    Reservation,
    earliest_start,
    expected_end,
    node_space,
    reason,
)
from kilter.topology.split_wait import SplitWait, fewest_domains_idle

__all__ = [
    "LAST_INSTANT_S",
    "ExpectedStart",
    "ExpectedStarts",
    "Held",
    "StartsOfStore",
    "Waiting",
    "banded_earliest_start",
    "expected_starts",
    "held_gangs",
    "pending_gangs",
    "reserve",
    "start_of_job",
    "start_of_request",
]

log = logging.getLogger("kilter.gangs")

VOLCANO = "scheduling.volcano.sh"
LAST_INSTANT_S = 253_402_300_799.0  # 9999-12-31T23:59:59Z: a start past it rests on absurd estimates
_WAITING_PHASES = frozenset({"Pending", "Inqueue"})


@dataclass(frozen=True, slots=True)
class Held:
    """A running gang: its GPUs per node (fleet indices) and when it is expected to free them."""

    key: str
    nodes: tuple[int, ...]
    gpus: tuple[int, ...]
    started_s: float
    runtime_s: float | None
    expected_end_s: float
    problem: str = ""  # why its runtime is unknown though its job declares one (a bad annotation)


@dataclass(frozen=True, slots=True)
class Waiting:
    """A pending gang in queue order: its pod sets (pods, GPUs per pod), and per platform it may run on (fleet
    platform index) the domains it may take."""

    kind: str  # Workload, PodGroup, or "pods of gang"
    namespace: str
    name: str
    priority: int
    created_s: float
    pod_sets: tuple[tuple[int, int], ...] = ()
    platforms: tuple[tuple[int, int], ...] = ()  # (platform, domains allowed); none: the idle fleet cannot hold it
    runtime_s: float | None = None
    problem: str = ""  # why it is not reserved for before anything is tried (a bad annotation, an unreadable job)
    quota_reserved: bool = False

    @property
    def owner(self) -> str:
        """``namespace/name``: whose a reservation is, in every door's words."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ExpectedStart:
    """A pending gang's promise (``reservation``, its ``domains`` by name) or, without one, ``reason`` why not."""

    gang: Waiting
    reservation: Reservation | None
    domains: tuple[str, ...]
    reason: str

    @property
    def start_s(self) -> float | None:
        return self.reservation.start_s if self.reservation is not None else None


@dataclass(frozen=True)
class ExpectedStarts:
    """Every pending gang's expected start at ``now_s``, in queue order, over ``holdings``."""

    now_s: float
    holdings: tuple[Held, ...]
    starts: tuple[ExpectedStart, ...]
    _index: dict[tuple[str, str, str], ExpectedStart] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for s in self.starts:
            self._index.setdefault((s.gang.kind, s.gang.namespace, s.gang.name), s)

    def of(self, kind: str, namespace: str, name: str) -> ExpectedStart | None:
        return self._index.get((kind, namespace, name))

    @property
    def reservations(self) -> tuple[Reservation, ...]:
        return tuple(s.reservation for s in self.starts if s.reservation is not None)

    @property
    def held(self) -> int:
        """Pending gangs with a reservation (``kilter_reservations_held``)."""
        return sum(1 for s in self.starts if s.reservation is not None)

    def holdings_rows(self) -> Holdings:
        return Holdings.of(Holding(h.nodes, h.gpus, h.expected_end_s) for h in self.holdings)


def expected_starts(
    state: ClusterState,
    *,
    now_s: float,
    fleet: Fleet | None = None,
    learned: Learned | None = None,
    settings: QueueWaitRules | None = None,
) -> ExpectedStarts:
    """Every pending gang's expected start (module docstring). ``fleet`` defaults to the state's, ``learned`` to
    the runtimes its finished Workloads tell, ``settings`` (where a gang queues) to the state's own."""
    fleet = state.fleet() if fleet is None else fleet
    if learned is None:
        learned = learner_of(state.workloads, state.catalog.device_resources).estimate
    settings = QueueWaitRules.build(state, SplitWait()) if settings is None else settings
    held = held_gangs(state, fleet, now_s=now_s, learned=learned, settings=settings)
    return ExpectedStarts(
        now_s, tuple(held), tuple(reserve(pending_gangs(state, fleet, learned, settings), fleet, held, now_s))
    )


# ---------------------------------------------------------------- holdings


def _time(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return parse_time(value, path="time")
    except InputError:
        return None


def _workloads_by_name(state: ClusterState) -> dict[tuple[str, str], Workload]:
    """Workloads not finished, by (namespace, name) and by (namespace, owning job's name)."""
    out: dict[tuple[str, str], Workload] = {}
    for wl in sorted(state.workloads, key=lambda w: (w.metadata.namespace, w.metadata.name)):
        if wl.status.condition("Finished"):
            continue
        ns = wl.metadata.namespace
        out.setdefault((ns, wl.metadata.name), wl)
        for ref in wl.metadata.owner_references:
            out.setdefault((ns, ref.name), wl)
    return out


def _raw_index(state: ClusterState, group: str, kind: str) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for obj in state.raw.of(group, kind):
        meta = obj.get("metadata")
        if isinstance(meta, Mapping):
            out.setdefault((str(meta.get("namespace") or ""), str(meta.get("name") or "")), obj)
    return out


def _bound_gpu_pods(state: ClusterState, fleet: Fleet) -> dict[str, list[tuple[Pod, int, int]]]:
    """Per gang key, (pod, node index, GPUs) of each bound GPU pod that has not ended; a pod of no gang is keyed
    ``namespace/pod/name``."""
    resources = sorted(state.catalog.device_resources)
    out: dict[str, list[tuple[Pod, int, int]]] = {}
    for pod in state.pods:
        node = fleet.node_index.get(pod.spec.node_name) if pod.spec.node_name else None
        if node is None or pod.status.phase in ENDED_PHASES:
            continue
        gpus = 0
        for r in resources:
            n = pod_gpus.count(pod.spec, r)
            gpus += int(fleet.bitmap.node_gpu_counts[node]) if isinstance(n, pod_gpus.Unreadable) else n
        if gpus <= 0:
            continue
        key = key_of(pod)
        text = key.format() if key is not None else f"{pod.metadata.namespace}/pod/{pod.metadata.name}"
        out.setdefault(text, []).append((pod, node, gpus))
    return out


def _owner_of(
    key: str, pods: Sequence[Pod], workloads: Mapping[tuple[str, str], Workload], groups: Mapping[Any, Any]
) -> tuple[str, Workload | None, Mapping[str, Any] | None]:
    """The object a running gang's job is read from: its Workload (by name or its job's name), its PodGroup, or
    none (its pods alone)."""
    try:
        gk: GangKey | None = GangKey.parse(key)
    except InputError:
        gk = None
    ns = pods[0].metadata.namespace
    names = [gk.names[0]] if gk is not None else []
    names += sorted({r.name for p in pods for r in p.metadata.owner_references})
    for name in names:
        wl = workloads.get((ns, name))
        if wl is not None:
            return "Workload", wl, None
    if gk is not None and gk.kind == "podgroup":
        group = groups.get((ns, gk.names[0]))
        if group is not None:
            return "PodGroup", None, group
    return "pods of gang", None, None


def held_gangs(
    state: ClusterState, fleet: Fleet, *, now_s: float, learned: Learned | None, settings: QueueWaitRules
) -> list[Held]:
    """Every running gang's holding (module docstring), by key."""
    workloads = _workloads_by_name(state)
    raw_workloads = _raw_index(state, KUEUE_GROUP, "Workload")
    groups = _raw_index(state, VOLCANO, "PodGroup")
    out = []
    for key, members in sorted(_bound_gpu_pods(state, fleet).items()):
        pods = sorted((m[0] for m in members), key=lambda p: p.metadata.name)
        kind, wl, group = _owner_of(key, pods, workloads, groups)
        obj: Mapping[str, Any] | None = group
        started = None
        if wl is not None:
            obj = raw_workloads.get((wl.metadata.namespace, wl.metadata.name))
            started = _time(wl.status.since("Admitted")) if wl.status.condition("Admitted") else None
        if started is None:
            starts = [t for p in pods if (t := _time(p.status.start_time)) is not None]
            made = [t for p in pods if (t := _time(p.metadata.creation_timestamp)) is not None]
            started = min(starts) if starts else min(made) if made else now_s
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        name = str(meta.get("name")) if isinstance(meta, Mapping) else key.split("/")[-1]
        nodes = np.bincount([m[1] for m in members], weights=[m[2] for m in members], minlength=len(fleet.node_names))
        used = np.flatnonzero(nodes)
        gpus = sum(m[2] for m in members)
        problem, runtime = "", None
        try:
            facts = facts_of(kind, pods[0].metadata.namespace, name, obj, pods, settings)
            runtime = expected_runtime(facts, gpus, learned)
        except InputError as exc:
            problem = str(exc)
        end = expected_end(started, runtime, now_s)
        out.append(Held(key, tuple(used.tolist()), tuple(int(g) for g in nodes[used]), started, runtime, end, problem))
    return out


# ---------------------------------------------------------------- pending gangs


def _domains_allowed(fleet: Fleet, request: GangRequest) -> tuple[tuple[int, int], ...]:
    """(platform, domains the gang may take) per platform of the fleet it could run on; none where the idle
    fleet cannot hold it."""
    shapes = tuple((ps.count, ps.gpus_per_pod) for ps in request.pod_sets)
    required = request.one_domain or any(ps.topology.required for ps in request.pod_sets)
    loose = all(ps.topology.unconstrained for ps in request.pod_sets)
    out = []
    for i, p in enumerate(fleet.platforms):
        if p.device_resource != request.resource or (request.platform and p.name != request.platform):
            continue
        least = fewest_domains_idle(fleet, i, shapes)
        if not least or (required and least > 1):
            continue
        out.append((i, 1 if required else len(fleet.domain_ids) if loose else least))
    return tuple(out)


Asked = tuple[list[GangRequest], list[PodTemplateSpec]]  # a job's GPU gangs, and its pod templates


def _requests_of(fleet: Fleet, job_obj: dict[str, Any]) -> Asked:
    job = read_job(job_obj)
    requests = [
        gang_request(job.name if len(job.gangs) == 1 else f"{job.name}/group-{i}", ps, fleet.catalog)
        for i, ps in enumerate(job.gangs)
    ]
    return [r for r in requests if r.pod_sets], [ps.template for gang in job.gangs for ps in gang]


def _merged(requests: Sequence[GangRequest], fleet: Fleet) -> tuple[tuple[tuple[int, int], ...], tuple[Any, ...]]:
    """A job of several gangs waits for them all: their pod sets together, in as many domains as each takes."""
    shapes = tuple((ps.count, ps.gpus_per_pod) for r in requests for ps in r.pod_sets)
    each = [dict(_domains_allowed(fleet, r)) for r in requests]
    common = set(each[0]).intersection(*each[1:]) if each else set()
    return shapes, tuple((p, sum(e[p] for e in each)) for p in sorted(common))


def _pending_workloads(
    state: ClusterState, fleet: Fleet, learned: Learned | None, settings: QueueWaitRules
) -> Iterable[Waiting]:
    raw = _raw_index(state, KUEUE_GROUP, "Workload")
    try:
        infos = {i.key: i for i in workload_infos(state.workloads, state.local_queues, state.priority_classes)}
    except InputError:
        infos = {}
    for wl in state.workloads:
        status, meta = wl.status, wl.metadata
        if status.condition("Finished") or status.condition("Admitted"):
            continue
        info = infos.get(f"{meta.namespace}/{meta.name}")
        created = _time(meta.creation_timestamp)
        base = Waiting(
            "Workload",
            meta.namespace,
            meta.name,
            info.priority if info is not None else (wl.spec.priority or 0),
            created if created is not None else math.inf,
            quota_reserved=status.condition("QuotaReserved"),
        )
        obj = raw.get((meta.namespace, meta.name))
        yield _read(base, fleet, partial(_requests_of, fleet, dict(obj or {})), obj, (), learned, settings)


def _read(
    base: Waiting,
    fleet: Fleet,
    requests: Callable[[], Asked],
    obj: Mapping[str, Any] | None,
    pods: Sequence[Pod],
    learned: Learned | None,
    settings: QueueWaitRules,
) -> Waiting:
    """``base`` with its pod sets, domains allowed and runtime; a job that does not read keeps the error."""
    try:
        asked, templates = requests()
        if not asked:
            return _with(base, problem="it asks for no GPUs")
        shapes, platforms = _merged(asked, fleet)
        gpus = sum(c * g for c, g in shapes)
        facts = facts_of(base.kind, base.namespace, base.name, obj, [*pods, *templates], settings)
        runtime = expected_runtime(facts, gpus, learned)
    except InputError as exc:
        return _with(base, problem=str(exc))
    return _with(base, pod_sets=shapes, platforms=platforms, runtime_s=runtime)


def _with(base: Waiting, **changes: Any) -> Waiting:
    values = {f: getattr(base, f) for f in Waiting.__slots__}
    values.update(changes)
    return Waiting(**values)


def _pending_pods(state: ClusterState) -> dict[str, list[Pod]]:
    out: dict[str, list[Pod]] = {}
    for pod in state.pods:
        if pod.spec.node_name or pod.status.phase in ENDED_PHASES:
            continue
        key = key_of(pod)
        if key is not None:
            out.setdefault(key.format(), []).append(pod)
    return out


def _pods_request(fleet: Fleet, name: str, pods: Sequence[Pod]) -> Asked:
    resources = sorted(fleet.catalog.device_resources)
    per: dict[int, list[Pod]] = {}
    for pod in pods:
        asked = pod_gpus.ask(pod.spec, resources, who=f"pod {pod.metadata.name}")
        if asked is not None:
            per.setdefault(asked[1], []).append(pod)
    sets = [
        PodSetSpec(f"gpus-{g}", len(ps), PodTemplateSpec(metadata=ps[0].metadata, spec=ps[0].spec))
        for g, ps in sorted(per.items(), reverse=True)
    ]
    return ([gang_request(name, sets, fleet.catalog)] if sets else []), []


def _pending_of_pods(
    state: ClusterState, fleet: Fleet, learned: Learned | None, settings: QueueWaitRules
) -> Iterable[Waiting]:
    """Volcano PodGroups Pending or Inqueue and gangs of bare pods, from their pods not yet bound."""
    workloads = _workloads_by_name(state)
    groups = _raw_index(state, VOLCANO, "PodGroup")
    typed = {(g.metadata.namespace, g.metadata.name): g for g in state.pod_groups}
    for key, pods in sorted(_pending_pods(state).items()):
        gk = GangKey.parse(key) if key.split("/")[1:2] != [""] else None
        if gk is None:
            continue
        ns, name = gk.namespace, gk.names[0]
        owners = {name, *(r.name for p in pods for r in p.metadata.owner_references)}
        if any((ns, n) in workloads for n in owners):
            continue  # Kueue's: its Workload is the gang
        pods = sorted(pods, key=lambda p: p.metadata.name)
        made = [t for p in pods if (t := _time(p.metadata.creation_timestamp)) is not None]
        kind, obj = "pods of gang", None
        if gk.kind == "podgroup" and (ns, name) in groups:
            group = typed.get((ns, name))
            if group is not None and group.status.phase not in _WAITING_PHASES:
                continue
            kind, obj = "PodGroup", groups[(ns, name)]
            made = [t for t in [_time(group.metadata.creation_timestamp if group else None)] if t is not None] or made
        elif gk.kind != "podgroup":
            name = gk.name
        base = Waiting(kind, ns, name, 0, min(made) if made else math.inf)
        yield _read(base, fleet, partial(_pods_request, fleet, name, pods), obj, pods, learned, settings)


def pending_gangs(
    state: ClusterState, fleet: Fleet, learned: Learned | None, settings: QueueWaitRules
) -> list[Waiting]:
    """Every pending gang in queue order (module docstring)."""
    found = [*_pending_workloads(state, fleet, learned, settings), *_pending_of_pods(state, fleet, learned, settings)]
    return sorted(found, key=lambda w: (not w.quota_reserved, -w.priority, w.created_s, w.kind, w.namespace, w.name))


# ---------------------------------------------------------------- reservations


def _no_start_reason(gang: Waiting) -> str:
    if gang.problem:
        return gang.problem
    if not gang.platforms:
        return "no start: the idle fleet cannot hold it in the domains it may take"
    return (
        "no start can be promised: the GPUs it needs are held by jobs with no expected end "
        "(no kilter.dev/expected-runtime and no finished runs to learn from) or promised to gangs ahead of it "
        "with none"
    )


def banded_earliest_start(
    owner: str,
    pod_sets: tuple[tuple[int, int], ...],
    k: int,
    space: NodeSpace,
    holdings: Holdings,
    reservations: Sequence[Reservation],
    now_s: float,
    runtime_s: float | None,
) -> Reservation | None:
    """``reservations.earliest_start``'s answer, asked of a few reservations at a time.

    Its cost grows with every earlier reservation times every node, at each
    moment it tries; behind hundreds of gangs that is seconds. Most earlier
    reservations cannot matter: first the start with none at all (a bound:
    reservations only take room), then the candidate moments in growing
    bands from there, each asked with only the reservations whose window
    meets a start in the band (the others end before it or begin after its
    last start's run) and with ``now`` moved to the band's first moment
    (what ended by then has freed its GPUs). The first band that holds the
    start gives the very reservation the whole list would, since every
    reservation that meets it is in the band and no earlier moment fit with
    fewer in the way; one on another platform claims nothing here.
    """
    base = earliest_start(owner, pod_sets, k, space, holdings, (), now_s, runtime_s)
    mine = [r for r in reservations if space.capacity[np.asarray(r.nodes, np.int64)].any()]
    if base is None or not mine:
        return base
    runtime = math.inf if runtime_s is None else runtime_s
    starts = np.asarray([r.start_s for r in mine])
    stops = np.asarray([_past(r.start_s, r.expected_end_s) for r in mine])
    moments = np.unique(np.concatenate(([base.start_s], holdings.end_s, [r.expected_end_s for r in mine])))
    moments = moments[np.isfinite(moments) & (moments >= base.start_s)]
    first, step = 0, 8
    while True:
        last = min(first + step, len(moments) - 1)
        t0, horizon = float(moments[first]), float(moments[last])
        band = (starts < _past(horizon, horizon + runtime)) & (stops > t0)
        found = earliest_start(
            owner, pod_sets, k, space, holdings, [mine[i] for i in np.flatnonzero(band)], t0, runtime_s
        )
        if found is None or found.start_s <= horizon or last == len(moments) - 1:
            return found
        first, step = last + 1, step * 4


def _past(start_s: float, end_s: float) -> float:
    """The end of the window ``[start_s, end_s)``; an empty one is its first instant."""
    return end_s if end_s > start_s else math.nextafter(start_s, math.inf)


def start_of_request(
    owner: str,
    pod_sets: tuple[tuple[int, int], ...],
    platforms: tuple[tuple[int, int], ...],
    runtime_s: float | None,
    fleet: Fleet,
    holdings: Holdings,
    reservations: Sequence[Reservation],
    now_s: float,
    spaces: dict[int, NodeSpace] | None = None,
) -> Reservation | None:
    """The earliest reservation over the platforms a gang may run on (ties to the first), around
    ``reservations``; None when none comes (or only past ``LAST_INSTANT_S``)."""
    spaces = {} if spaces is None else spaces
    best: Reservation | None = None
    for platform, k in platforms:
        space = spaces.get(platform)
        if space is None:
            space = spaces[platform] = node_space(fleet, platform)
        found = banded_earliest_start(owner, pod_sets, k, space, holdings, reservations, now_s, runtime_s)
        if found is not None and found.start_s <= LAST_INSTANT_S and (best is None or found.start_s < best.start_s):
            best = found
    return best


def reserve(
    gangs: Iterable[Waiting],
    fleet: Fleet,
    held: Sequence[Held],
    now_s: float,
    ahead: Sequence[Reservation] = (),
) -> list[ExpectedStart]:
    """Each gang's earliest start in turn, around every earlier one's reservation (after ``ahead``)."""
    holdings = Holdings.of(Holding(h.nodes, h.gpus, h.expected_end_s) for h in held)
    spaces: dict[int, NodeSpace] = {}
    reservations: list[Reservation] = list(ahead)
    out = []
    for gang in gangs:
        found = None
        if not gang.problem and gang.platforms:
            try:
                found = start_of_request(
                    gang.owner,
                    gang.pod_sets,
                    gang.platforms,
                    gang.runtime_s,
                    fleet,
                    holdings,
                    reservations,
                    now_s,
                    spaces,
                )
            except InputError as exc:
                gang = _with(gang, problem=str(exc))
        if found is None:
            out.append(ExpectedStart(gang, None, (), _no_start_reason(gang)))
            continue
        reservations.append(found)
        names = tuple(fleet.domain_ids[d] for d in found.domains)
        out.append(ExpectedStart(gang, found, names, reason(found, fleet.domain_ids)))
    return out


def start_of_job(
    starts: ExpectedStarts,
    state: ClusterState,
    fleet: Fleet,
    obj: Mapping[str, Any],
    *,
    learned: Learned | None = None,
    settings: QueueWaitRules | None = None,
) -> ExpectedStart:
    """When job ``obj`` (any job kind ``read_job`` reads, as received) would start were it queued behind every
    pending gang of ``starts`` (its own entry there, if any, left out): what ``kilter plan --now`` reports for a
    job that cannot start now."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    kind = str(obj.get("kind") or "Job")
    base = Waiting(kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""), 0, starts.now_s)
    if learned is None:
        learned = learner_of(state.workloads, state.catalog.device_resources).estimate
    settings = QueueWaitRules.build(state, SplitWait()) if settings is None else settings
    gang = _read(base, fleet, partial(_requests_of, fleet, dict(obj)), obj, (), learned, settings)
    ahead = [r for r in starts.reservations if r.owner != gang.owner]
    return reserve([gang], fleet, starts.holdings, starts.now_s, ahead)[0]


# ---------------------------------------------------------------- per store


class StartsOfStore:
    """Expected starts of a live store, worked out again only when the state changed or a second passed (servers
    ask repeatedly: every view, every scrape); ``max_age_s`` lets a reader that needs no fresher answer (a
    gauge) keep one that old while the state stays the same."""

    def __init__(
        self,
        store: ClusterStore,
        clock: Callable[[], float],
        learned: Learned | None = None,
        settings: Callable[[], QueueWaitRules] | None = None,
        *,
        max_age_s: float = 0.0,
    ) -> None:
        self.store = store
        self.clock = clock
        self.learned = learned
        self.settings = settings
        self.max_age_s = max_age_s
        self._last: tuple[tuple[int, int], float, ExpectedStarts] | None = None

    def current(self) -> ExpectedStarts:
        fleet = self.store.fleet()
        now = float(math.floor(self.clock()))
        key = (self.store.version, self.store.generation)
        if self._last is None or self._last[0] != key or now - self._last[1] > self.max_age_s:
            state = self.store.state()
            settings = self.settings() if self.settings is not None else None
            found = expected_starts(state, now_s=now, fleet=fleet, learned=self.learned, settings=settings)
            self._last = (key, now, found)
        return self._last[2]

    def held(self) -> int:
        """Pending gangs with a reservation now (``kilter_reservations_held``); 0 while the state does not read."""
        try:
            return self.current().held
        except InputError as exc:
            log.warning("expected starts: %s", exc)
            return 0

"""One cycle of Slurm's backfill scheduler: in priority order, start each job now or reserve it its earliest start.

Follows ``_attempt_backfill`` in SchedMD/slurm at 284c3b95
(``src/plugins/sched/backfill/backfill.c``), with the node-space map and
the will-run search of ``slurm_nodespace`` and the placement of
``slurm_block``. The simulation around it (``slurm_backfill``) decides when
a cycle runs and what each job's time limit is; ``Scheduler`` is what a
cycle asks of it.

Each job-partition pair, in order, up to ``bf_max_job_test``: a job over
its quota is skipped; one that fits now on nodes no earlier reservation
needs before its time limit ends starts; any other is reserved the nodes
and the earliest time it fits, within ``bf_window``; the cycle ends when the
map reaches ``bf_node_space_size`` records. A reservation changes what
happens only through the starts after it, so the cycle also ends as soon as
no pair left could start now whatever else happens (``Cycle.may_start``):
every key (a gang shape in a partition) has failed to start at the
shortest time limit its remaining pairs have. That changes no start and
saves most of the reservations Slurm makes for the record.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from kilter.sim.engine import Outcome
from kilter.sim.gangs import Gang
from kilter.sim.placement import Nodes
from kilter.sim.slurm_block import SlurmBlock, may_fit, options
from kilter.sim.slurm_nodespace import FirstFull, NodeSpace, earliest
from kilter.sim.trace import TraceJob
from kilter.topology.fleet import Fleet

__all__ = ["BackfillCycle", "BackfillSettings", "Cycle", "Reservation", "Running", "Scheduler"]

Partition = tuple[int, tuple[str, str]]  # (platform, (flavor, resource))


@dataclass(frozen=True)
class BackfillSettings:
    """``SchedulerParameters`` as an operator of long ML jobs sets them (slurm.conf.5 gives the defaults).

    ``bf_interval`` 30 s and ``bf_max_job_test`` 500 are the defaults
    (backfill.c ``BACKFILL_INTERVAL``, ``DEF_BF_MAX_JOB_TEST``), and so is
    ``bf_node_space_size`` (= ``bf_max_job_test``). ``bf_window`` is 30 days,
    Slurm's maximum: the docs advise a window at least as long as the highest
    allowed time limit, and ``MaxTime`` is unlimited. ``bf_resolution`` is
    600 s, not 60: the docs advise raising it with the window and for
    imprecise time limits (learned ones are), and SchedMD's high-throughput
    guide uses 600.
    """

    interval_s: float = 30.0
    max_job_test: int = 500
    node_space_size: int = 500
    window_s: float = 43200 * 60.0
    resolution_s: float = 600.0


@dataclass(frozen=True)
class Reservation:
    """A backfill plan: job ``job`` on ``nodes`` from ``start_s`` to ``end_s``; ``started``: it started now (its
    span is its time limit), else it is a reservation (grid-aligned)."""

    job: int
    start_s: float
    end_s: float
    nodes: tuple[int, ...]
    started: bool = False


@dataclass(frozen=True)
class Running:
    """A job running when a cycle began: its nodes and each pod's GPUs there, its start and its time limit."""

    nodes: tuple[int, ...]
    pod_gpus: tuple[int, ...]
    start_s: float
    limit_s: float


@dataclass
class BackfillCycle:
    """What one backfill cycle at ``now`` did, for tests and reports: its starts and reservations in the order
    it made them, the jobs of the job-partition pairs it tested, in order, and (when someone watches) what was
    running."""

    now: float
    steps: list[Reservation] = field(default_factory=list)
    tested: list[int] = field(default_factory=list)
    running: dict[int, Running] = field(default_factory=dict)

    @property
    def started(self) -> list[int]:
        return [step.job for step in self.steps if step.started]

    @property
    def reservations(self) -> list[Reservation]:
        return [step for step in self.steps if not step.started]


class Scheduler(Protocol):
    """What a cycle reads and asks of the simulation (``slurm_backfill.SlurmSimulation``)."""

    fleet: Fleet
    jobs: Sequence[TraceJob]
    slurm: SlurmBlock
    settings: BackfillSettings
    limit_s: npt.NDArray[np.float64]  # each job's time limit, seconds
    outcome: Outcome

    @property
    def pending(self) -> list[int]:
        """Pending jobs in priority order."""
        ...

    def partitions(self, j: int) -> list[Partition]: ...

    def gang_of(self, j: int, platform: int) -> Gang: ...

    def within_limit(self, j: int, fr: tuple[str, str], platform: int) -> bool: ...

    def begin(self, j: int, gang: Gang, nodes: Nodes, fr: tuple[str, str], now: float) -> None: ...

    def ready_times(self, need: int, now: float, rows: Nodes | None = None) -> npt.NDArray[np.float64]: ...


Key = tuple[int, int]  # (GPUs, platform): jobs of one key are one gang shape in one partition


class _Window:
    """The job-partition pairs a cycle tests, grouped by key: for each key and position, the shortest time limit
    among its pairs after that position (built when first asked)."""

    def __init__(self, keys: list[Key], limits: list[float]) -> None:
        self.positions: dict[Key, list[int]] = {}
        for i, key in enumerate(keys):
            self.positions.setdefault(key, []).append(i)
        self._shortest: dict[Key, list[float]] = {}
        for key, where in self.positions.items():
            shortest = np.minimum.accumulate(np.asarray([limits[i] for i in where])[::-1])[::-1]
            self._shortest[key] = shortest.tolist()

    def after(self, key: Key, i: int) -> float | None:
        """The shortest limit of ``key``'s pairs after position ``i``; None when it has none left."""
        where = self.positions[key]
        k = bisect.bisect_right(where, i)
        return self._shortest[key][k] if k < len(where) else None


class Cycle:
    """One ``_attempt_backfill`` pass at ``now`` over the first ``bf_max_job_test`` job-partition pairs (module
    docstring); ``record`` is what it did."""

    def __init__(self, sim: Scheduler, now: float) -> None:
        self.sim = sim
        self.now = now
        s = sim.settings
        self.space = NodeSpace(sim.fleet.n_nodes, now=now, window_s=s.window_s, resolution_s=s.resolution_s)
        self.record = BackfillCycle(now)
        head = sim.pending[: s.max_job_test]
        self.pairs = [(j, platform, fr) for j in head for platform, fr in sim.partitions(j)][: s.max_job_test]
        self.failed: dict[Key, float] = {}  # key -> the shortest limit that could not start now
        self._window: _Window | None = None
        self.witness: Key | None = None  # a key that may still start now
        self._could: dict[Key, tuple[float, Nodes]] = {}  # key -> a limit and the nodes it could start on then
        self._ready: dict[int, npt.NDArray[np.float64]] = {}
        self._gangs: dict[Key, Gang] = {}
        self._first_full: dict[tuple[int, int], FirstFull] = {}

    def gang(self, j: int, platform: int) -> Gang:
        """Job ``j``'s gang as its key asks it (placement ignores which job it is)."""
        key = (self.sim.jobs[j].gpus, platform)
        made = self._gangs.get(key)
        if made is None:
            made = self._gangs[key] = self.sim.gang_of(j, platform)
        return made

    def ready(self, need: int) -> npt.NDArray[np.float64]:
        made = self._ready.get(need)
        if made is None:
            made = self._ready[need] = self.sim.ready_times(need, self.now)
        return made

    def starts_now(self, gang: Gang, limit_s: float) -> Nodes | None:
        """Nodes where the gang starts now without holding a node an earlier reservation needs in time."""
        need = max(g for _, g in gang.pod_sets)
        usable = (self.ready(need) <= self.now) & self.space.free_now(self.now, limit_s)
        return self.sim.slurm.select(self.sim.fleet, gang, usable)

    @property
    def window(self) -> _Window:
        if self._window is None:
            sim = self.sim
            keys = [(sim.jobs[j].gpus, platform) for j, platform, _ in self.pairs]
            self._window = _Window(keys, [float(sim.limit_s[j]) for j, _, _ in self.pairs])
        return self._window

    def may_start(self, after: int) -> bool:
        """Could a pair after position ``after`` still start now? False only when that is certain: every key
        left has failed at the shortest limit its remaining pairs have (a longer limit only fits less, and
        reservations and starts only take nodes)."""
        if self.witness is not None and self._alive(self.witness, after):
            return True
        self.witness = None
        for key in self.window.positions:
            if self._alive(key, after):
                self.witness = key
                return True
        return False

    def _alive(self, key: Key, after: int) -> bool:
        left = self.window.after(key, after)
        if left is None or self.failed.get(key, math.inf) <= left:
            return False
        j, platform, _ = self.pairs[self.window.positions[key][0]]
        gang = self.gang(j, platform)
        could = self._could.get(key)
        if could is not None and could[0] >= left:  # the nodes it found then are still free: it still could
            seen = could[1]
            need = max(g for _, g in gang.pod_sets)
            if (self.ready(need)[seen] <= self.now).all() and (self.space.first_start[seen] >= self.now + left).all():
                return True
        nodes = self.starts_now(gang, left)
        if nodes is not None:
            self._could[key] = (left, nodes)
            return True
        self.failed[key] = left
        return False

    def run(self) -> None:
        sim = self.sim
        for i, (j, platform, fr) in enumerate(self.pairs):
            if sim.outcome.start[j] == sim.outcome.start[j]:  # started under another partition this cycle
                continue
            self.record.tested.append(j)
            if not sim.within_limit(j, fr, platform):
                continue
            gang = self.gang(j, platform)
            key = (gang.gpus, platform)
            limit = float(sim.limit_s[j])
            nodes = None if self.failed.get(key, math.inf) <= limit else self.starts_now(gang, limit)
            if nodes is not None:
                sim.begin(j, dataclasses.replace(gang, job=j), nodes, fr, self.now)
                self.record.steps.append(Reservation(j, self.now, self.now + limit, tuple(nodes.tolist()), True))
                self.started(nodes)
                continue
            self.failed[key] = min(self.failed.get(key, math.inf), limit)
            if not self.may_start(i):
                return  # its reservation, and those after it, could change no start
            if self.space.records >= sim.settings.node_space_size:
                return  # "table size limit reached": the cycle ends here
            self.reserve(j, gang, limit)

    def started(self, nodes: Nodes) -> None:
        """A job started on ``nodes``: their ready times, and the blocks' first-full times, change."""
        for need, ready in self._ready.items():
            ready[nodes] = self.sim.ready_times(need, self.now, rows=nodes)
        for first in self._first_full.values():
            first.refresh(nodes)

    def first_full(self, platform: int, need: int) -> FirstFull:
        made = self._first_full.get((platform, need))
        if made is None:
            layout = self.sim.slurm.layout(self.sim.fleet, platform)
            made = self._first_full[platform, need] = FirstFull(self.space, layout, self.ready(need))
        return made

    def reserve(self, j: int, gang: Gang, limit: float) -> None:
        """Find the job's earliest start within ``bf_window`` and hold its nodes from then (``_add_reservation``)."""
        sim = self.sim
        space = self.space
        layout = sim.slurm.layout(sim.fleet, gang.platform)
        segment, consolidate = options(gang)
        need = max(g for _, g in gang.pod_sets)

        def fits(counts: npt.NDArray[np.int64], loose: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
            return may_fit(layout, counts, loose, gang.pods, segment=segment, consolidate=consolidate)

        one_block = not len(layout.loose) and not segment and gang.pods <= layout.base_size
        found = earliest(
            space,
            layout,
            ready=self.ready(need),
            limit_s=limit,
            until_s=self.now + sim.settings.window_s,
            one_block=self.first_full(gang.platform, need) if one_block else None,
            need=gang.pods,
            may_fit=fits,
            select=lambda usable: sim.slurm.select(sim.fleet, gang, usable),
        )
        if found is None:
            return
        t, nodes = found
        start, end = space.slot(t, limit)
        space.reserve(nodes, start, end)
        for (platform, _), first in self._first_full.items():
            if platform == gang.platform:
                first.reserved(nodes)
        self.record.steps.append(Reservation(j, start, end, tuple(nodes.tolist())))

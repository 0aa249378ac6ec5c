"""Slurm's main scheduler and backfill scheduler as the simulation's admission step, over ``topology/block``.

Follows SchedMD/slurm at 284c3b95 (2026-08-20): ``src/slurmctld/
job_scheduler.c`` (``_schedule``: the main scheduler) and ``src/plugins/
sched/backfill/backfill.c`` (``backfill_agent``, ``_more_work``,
``_load_config``); one backfill cycle is ``slurm_cycle``, the node-space map
and the will-run search ``slurm_nodespace``, placement ``slurm_block``.

Jobs are ordered by priority, all equal here, then submit time, across
ClusterQueues (Kueue's fair sharing does not apply: Slurm orders by
priority, and its fair-share factor is not modelled); a ClusterQueue's
flavors are the job's partitions, one per platform, tried in order.

* The main scheduler runs at every arrival and finish: jobs in order start
  where ``topology/block`` places them now, until one cannot; its
  partition is then failed for the pass (``fail_by_part``). Its queue depth
  (``default_queue_depth``) is not modelled.
* A backfill cycle (``slurm_cycle``) runs on the next ``bf_interval`` tick
  after any change (``_more_work``; its own starts are one): each job in
  order starts now where that delays no earlier job's reservation, or is
  reserved its earliest start.

Quota: each ClusterQueue is an association whose GrpTRES limit is what
Kueue says is ``available`` to it. A job over it does not start, and is
skipped without blocking anyone or being given a reservation (an
``ESLURM_ACCOUNTING_POLICY`` result fails no partition in ``_schedule``;
``_attempt_backfill`` skips it after ``_start_job`` and checks
``acct_policy_job_runnable_post_select`` before reserving). A quota that
leaves the job at least the platform's idle GPUs is not what holds it back,
though: its nodes are, and it waits for them with a reservation. (Without
a queue file the one ClusterQueue holds the whole fleet, which in Slurm is
no limit at all.)

Time limits are the runtime estimates kilter has (``RuntimeEstimates``:
learned by default, fed as jobs end; never the true duration unless the run
asks for the oracle), fixed when the job is submitted, as a job-submit
plugin would set ``--time``, in whole minutes. A job with no estimate runs
under the partition's limit: ``DefaultTime`` unset falls back to
``MaxTime``, left at Slurm's default ``UNLIMITED`` because a site of long
training runs does not kill them, which backfill reads as a year
(``_set_backfill_timelimits``). Jobs are not killed at their limit
(``OverTimeLimit=UNLIMITED``): they run their true duration, and backfill
expects an overdue one to end a time limit from now. No preemption.

``stats`` counts main passes, cycles, tested pairs, backfilled starts and
reservations made.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kilter.quota.available import available
from kilter.sim.engine import SimConfig, Simulation
from kilter.sim.gangs import Gang
from kilter.sim.kueue_cycles import KueueCycles
from kilter.sim.placement import Nodes, PlacementPolicy, free_gpus
from kilter.sim.queues import QueueSetup
from kilter.sim.slurm_block import SlurmBlock
from kilter.sim.slurm_cycle import BackfillCycle, BackfillSettings, Cycle, Partition, Running
from kilter.sim.slurm_nodespace import availability_times
from kilter.sim.split_hold import RuntimeEstimates
from kilter.sim.trace import TraceJob
from kilter.topology.fleet import Fleet

__all__ = ["YEAR_S", "SlurmSimulation"]

YEAR_S = 365 * 24 * 3600.0  # YEAR_MINUTES: how backfill reads an UNLIMITED time limit


@dataclass
class _Pods:
    """Running pods per node slot, for the will-run search: GPUs, the job's expected end and time limit."""

    gpus: npt.NDArray[np.int64]
    ends: npt.NDArray[np.float64]
    limits: npt.NDArray[np.float64]
    where: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # job -> (node, slot)


class SlurmSimulation(Simulation):
    def __init__(
        self,
        fleet: Fleet,
        jobs: Sequence[TraceJob],
        policy: PlacementPolicy,
        queues: QueueSetup,
        config: SimConfig,
        *,
        samples: int = 2000,
        settings: BackfillSettings | None = None,
        on_cycle: Callable[[BackfillCycle], None] | None = None,
    ) -> None:
        if not isinstance(policy, SlurmBlock):
            raise ValueError("SlurmSimulation places with SlurmBlock")
        # Kueue's cycles never run (``_schedule`` is Slurm's); they charge the GrpTRES limits, the ClusterQueues' quota
        super().__init__(fleet, jobs, policy, queues, config, admission=KueueCycles, samples=samples)
        self.slurm = policy
        self.settings = settings or BackfillSettings()
        self.on_cycle = on_cycle
        wait = config.split_wait
        self.estimates = RuntimeEstimates(wait.runtime_estimate, jobs, self.cq_of, seed=wait.seed)
        self.limit_s = np.full(len(jobs), math.nan)  # each job's time limit, fixed at submit
        self._queue: list[int] = []  # pending jobs in priority order
        self._partitions = {
            cq: [(p, (flavor, fleet.platforms[p].device_resource)) for p, flavor in queues.flavors[cq]]
            for cq in self.cq_names
        }
        self._changed = False
        self._next_backfill = math.inf
        self._finishes = 0  # jobs ended so far: until the next, capacity only shrinks
        self._stuck: dict[int, tuple[int, int]] = {}  # platform -> (job, finishes) when it last could not place
        slots = int(fleet.bitmap.node_gpu_counts.max(initial=1))
        zeros = np.zeros((fleet.n_nodes, max(slots, 1)))
        self._pods = _Pods(zeros.astype(np.int64), zeros.copy(), zeros.copy())
        self.stats = {"mainPasses": 0, "backfillCycles": 0, "tested": 0, "backfilled": 0, "reservations": 0}

    # ------------------------------------------------------------------ engine hooks

    def _enqueue(self, j: int) -> None:
        estimate = self.estimates.of(j)
        self.limit_s[j] = YEAR_S if estimate is None else max(60.0, math.ceil(estimate / 60.0) * 60.0)
        self._queue.append(j)  # arrivals come in submit order, and nothing is ever requeued
        self._waiting += 1
        self._changed = True

    def _ran_to_end(self, j: int) -> None:
        self.estimates.finished(j, float(self.outcome.run[j]))

    def _next_event_s(self) -> float:
        return self._next_backfill if self._waiting else math.inf

    def _holding(self) -> bool:
        return bool(self._waiting) and self._next_backfill < math.inf

    def _start(self, j: int, gang: Gang, nodes: Nodes, cq: str, fr: tuple[str, str], now: float) -> None:
        super()._start(j, gang, nodes, cq, fr, now)
        pods = self._pods
        end = now + float(self.limit_s[j])
        placed = pods.where[j] = []
        for node, gpus in zip(nodes.tolist(), gang.pod_gpus(), strict=True):
            slot = int(np.argmin(pods.gpus[node] > 0))
            pods.gpus[node, slot] = gpus
            pods.ends[node, slot] = end
            pods.limits[node, slot] = self.limit_s[j]
            placed.append((node, slot))

    def _finish(self, j: int) -> None:
        super()._finish(j)
        for node, slot in self._pods.where.pop(j):
            self._pods.gpus[node, slot] = 0
        self._changed = True
        self._finishes += 1

    # ------------------------------------------------------------------ scheduling

    def _schedule(self, now: float) -> None:
        """The main scheduler after any change; a backfill cycle when one is due (module docstring)."""
        if self._changed:
            self._changed = False
            self._main(now)
            interval = self.settings.interval_s
            self._next_backfill = min(self._next_backfill, math.ceil(now / interval) * interval)
        if self._waiting and now >= self._next_backfill:
            self._next_backfill = math.inf
            self._backfill(now)
        if not self._waiting:
            self._next_backfill = math.inf

    @property
    def pending(self) -> list[int]:
        """Pending jobs in priority order (``slurm_cycle.Scheduler``)."""
        return self._queue

    def partitions(self, j: int) -> list[Partition]:
        """Job ``j``'s partitions in order: (platform, (flavor, resource))."""
        return self._partitions[self.cq_of[j]]

    def gang_of(self, j: int, platform: int) -> Gang:
        return self._gang(j, platform)

    def within_limit(self, j: int, fr: tuple[str, str], platform: int) -> bool:
        """The association's GrpTRES limit (the ClusterQueue's quota) does not hold job ``j`` back.

        A quota that leaves the job at least the GPUs idle on the platform is
        not what holds it: its nodes are, and it waits for them like any job.
        (Without a queue file the one ClusterQueue has the whole fleet, which
        in Slurm is no limit at all.)
        """
        left = available(self.queues.tree.cluster_queues[self.cq_of[j]], fr)
        return left >= self.jobs[j].gpus or left >= self._free_on(platform)

    def begin(self, j: int, gang: Gang, nodes: Nodes, fr: tuple[str, str], now: float) -> None:
        self._start(j, gang, nodes, self.cq_of[j], fr, now)
        self._waiting -= 1

    def _main(self, now: float) -> None:
        """``job_scheduler.c`` ``_schedule``: start jobs in order until each partition has one that cannot."""
        self.stats["mainPasses"] += 1
        failed: set[int] = set()
        n_platforms = len(self.fleet.platforms)
        started: set[int] = set()
        for j in self._queue:
            if len(failed) >= n_platforms:
                break
            for platform, fr in self.partitions(j):
                if platform in failed or not self.within_limit(j, fr, platform):
                    continue
                if self._stuck.get(platform) == (j, self._finishes):  # nothing ended since it could not place
                    failed.add(platform)
                    continue
                gang = self._gang(j, platform)
                nodes = self.policy.place(self.fleet, gang)
                if nodes is None:
                    failed.add(platform)
                    if gang.slices or gang.pods <= self.slurm.layout(self.fleet, platform).base_size:
                        self._stuck[platform] = (j, self._finishes)  # fewer free nodes cannot make it fit
                    continue
                self.begin(j, gang, nodes, fr, now)
                started.add(j)
                break
        if started:
            self._queue = [j for j in self._queue if j not in started]

    def _backfill(self, now: float) -> None:
        cycle = Cycle(self, now)
        if self.on_cycle is not None:
            cycle.record.running = {
                j: Running(
                    tuple(nodes.tolist()), tuple(gang.pod_gpus()), float(self.outcome.start[j]), float(self.limit_s[j])
                )
                for j, (gang, nodes, _) in self._booked.items()
            }
        cycle.run()
        started = cycle.record.started
        if started:
            done = set(started)
            interval = self.settings.interval_s
            self._next_backfill = (math.floor(now / interval) + 1) * interval  # a change: look again (_more_work)
            self._queue = [j for j in self._queue if j not in done]
        self.stats["backfillCycles"] += 1
        self.stats["tested"] += len(cycle.record.tested)
        self.stats["backfilled"] += len(started)
        self.stats["reservations"] += len(cycle.record.reservations)
        if self.on_cycle is not None:
            self.on_cycle(cycle.record)

    def ready_times(self, need: int, now: float, rows: Nodes | None = None) -> npt.NDArray[np.float64]:
        """When each node (of ``rows``, else all) can take a pod of ``need`` GPUs, running jobs ending as
        expected (``slurm_nodespace.availability_times``)."""
        pods = self._pods
        pick = slice(None) if rows is None else rows
        return availability_times(
            pods.gpus[pick], pods.ends[pick], pods.limits[pick], free_gpus(self.fleet).astype(np.int64)[pick],
            self.fleet.bitmap.node_usable_flags[pick] != 0, need=need, now=now,
        )  # fmt: skip

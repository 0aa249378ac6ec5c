"""A firmware rollout over every scale-up domain while the trace runs: kilter's planned drain against a naive one.

From ``at`` on (``maintenance_spec``), every domain of the fleet is taken
out once, at most ``k`` cordoned or out at once, each for ``step`` once
drained. A *step* is a batch of up to ``k`` domains: they are cordoned
together (no new pod lands there), each is drained (what still runs there is
killed) and is back ``step`` after its drain; the next step begins when the
whole batch is back. Two ways to choose the batches:

* ``kilter``: at each step's start, ``topology.maintenance.plan_maintenance``
  (the very function ``kilter maintenance plan`` runs) plans the domains not
  yet done over the jobs running then, and the plan's first step is carried
  out: its domains are cordoned at once, and each is drained at its planned
  moment, or earlier once the jobs the plan waits for there have ended (or
  nothing runs there any more). Then the rest is planned again, over the jobs
  running then: a plan is only as good as its guesses, and each step corrects
  them.
* ``naive``: a script's rolling drain: domains in name order, ``k`` at a
  time, cordoned and drained at once.

**What the planner knows** is what a cluster knows, never a job's true
length: each running job's GPUs per domain; when it began computing; its
expected end, its current run's start plus the runtime estimate the split
wait uses (``--runtime-estimate``: learned per ClusterQueue and size class
from the jobs that ended, or a user's noisy declaration; ``oracle`` only when
asked for). A job already running past its estimate has no known end (None:
the planner treats it as running on). A kill loses at most the checkpoint
interval of ``FailureSettings`` (``--checkpoint-minutes``).

**A kill** is ``failing``'s: the gang rolls back to its last checkpoint
(the run time since it is lost, on all its GPUs), goes back to its queue in
submission order and resumes from the checkpoint when admitted again, after
the restart time. A job spanning domains is killed at its first drain only.

Node failures (``--node-mtbf``) may run alongside: a failed node in a
cordoned or drained domain comes back cordoned, and the rollout's kills are
counted apart from the failures' losses.

What is reported (``rollout_metrics``): jobs killed, GPU-hours of work lost
to the kills, GPU-hours the cordoned domains sat idle waiting for their
drain, when the rollout began and ended, the most domains cordoned or out at
once, and (kilter) what its first plan expected to lose.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from kilter.sim.failing import NodeFailures
from kilter.sim.gangs import Gang
from kilter.sim.maintenance_spec import MaintenanceSettings
from kilter.sim.parts import Part
from kilter.sim.placement import Nodes
from kilter.sim.split_hold import RuntimeEstimates
from kilter.topology import maintenance as planner

if TYPE_CHECKING:
    from kilter.sim.engine import Simulation

__all__ = ["DomainRecord", "Maintenance", "Rollout", "rollout_metrics"]


@dataclass
class DomainRecord:
    """One domain's turn: its step, when it was cordoned, when the plan meant to drain it and when it was drained,
    when it was back, the jobs the plan waited for and those killed at its drain (trace indices)."""

    domain: str
    step: int
    cordoned_s: float
    planned_drain_s: float
    waits_for: frozenset[int] = frozenset()
    drained_s: float = math.nan
    back_s: float = math.nan
    killed: list[int] = field(default_factory=list)


@dataclass
class Rollout:
    """What the rollout did (seconds, GPU-seconds); ``plans`` counts the planner's methods (kilter only)."""

    order: str
    begin_s: float
    domains: list[DomainRecord] = field(default_factory=list)
    lost_gpu_s: float = 0.0
    idle_gpu_s: float = 0.0
    most_out: int = 0
    plans: Counter[str] = field(default_factory=Counter)
    first_plan_lost_gpu_h: float | None = None  # what the first plan expected its kills to lose
    first_plan_naive_gpu_h: float | None = None  # and what it expected the naive drain to lose

    @property
    def end_s(self) -> float:
        return max((d.back_s for d in self.domains), default=math.nan)

    @property
    def kills(self) -> int:
        return sum(len(d.killed) for d in self.domains)


@dataclass
class _Cordon:
    """A cordoned domain waiting for its drain: the plan's moment, the jobs it waits for, the jobs on it."""

    record: DomainRecord
    jobs: set[int]


class Maintenance(Part):
    """A rollout over every domain while the trace runs (module docstring); its kills roll gangs back to their
    checkpoints as ``failures`` does, and nodes failing meanwhile come back cordoned where their domain is."""

    def __init__(self, sim: Simulation, failures: NodeFailures, rollout: MaintenanceSettings) -> None:
        self.sim = sim
        self.failures = failures
        failures.keep_out.append(self._keeps_out)
        self.settings_m: MaintenanceSettings = rollout
        fleet, jobs, config = sim.fleet, sim.jobs, sim.config
        bm = fleet.bitmap
        self._node_start = bm.domain_node_start.copy()
        self._was_usable = bm.node_usable_flags.copy() != 0
        self._capacity = bm.domain_usable_gpus.copy()  # GPUs the rollout takes out of service, per domain
        self._index = {name: d for d, name in enumerate(fleet.domain_ids)}
        self._left = planner.naive_order(fleet.domain_ids)
        self._estimates = RuntimeEstimates(
            config.split_wait.runtime_estimate, jobs, sim.cq_of, seed=config.split_wait.seed
        )
        self._run_began: dict[int, float] = {}
        self._cordoned: dict[int, _Cordon] = {}
        self._out: dict[int, DomainRecord] = {}
        self._begin_at = (jobs[0].submit_s if jobs else 0.0) + self.settings_m.at_s
        self._steps = 0
        self.rollout = Rollout(self.settings_m.order, self._begin_at)

    # ------------------------------------------------------------------ the engine's moments

    def next_event_s(self) -> float:
        drains = (c.record.planned_drain_s for c in self._cordoned.values())
        backs = (r.drained_s + self.settings_m.step_s for r in self._out.values())
        first = self._begin_at if not self._steps else math.inf
        return min((first, *drains, *backs))

    def holding(self) -> bool:
        """The rollout is not over: the run goes on until the last domain is back, even on an idle fleet."""
        return bool(self._left or self._cordoned or self._out)

    def on_events(self, now: float) -> None:
        grew = False
        for d, record in sorted(self._out.items()):
            if record.drained_s + self.settings_m.step_s <= now:
                del self._out[d]
                record.back_s = now
                self._uncordon(d)
                grew = True
        if self._left and not self._cordoned and not self._out and now >= self._begin_at:
            self._begin_step(now)  # the first at ``at``, each later one as the one before is back
        while self._drain_due(now):  # a kill at one drain may empty another cordoned domain: look again
            grew = True  # the kills freed GPUs elsewhere
        if grew:
            self.sim._capacity_grew()

    def _drain_due(self, now: float) -> bool:
        """Drain the first cordoned domain whose moment has come: its planned one, or the jobs it waits for have
        ended, or nothing runs there any more. Was there one?"""
        for d in sorted(self._cordoned):
            cordon = self._cordoned[d]
            running = self._still_on(d, cordon.jobs)
            waited = cordon.record.waits_for
            if now >= cordon.record.planned_drain_s or not running or (waited and not waited & running):
                self._drain(d, running, now)
                return True
        return False

    def started(self, j: int, gang: Gang, nodes: Nodes, now: float) -> None:
        self._run_began[j] = now

    def ran_to_end(self, j: int) -> None:
        """Learn from its last run, from its last start to its end, as a Workload's last admission shows it."""
        self._estimates.finished(j, float(self.sim.outcome.end[j]) - self._run_began[j])

    def _keeps_out(self, node: int) -> bool:
        """A repaired node of a cordoned or drained domain stays cordoned until its domain is back."""
        d = int(self.sim.fleet.node_domain[node])
        return d in self._cordoned or d in self._out

    def account(self, t0: float, t1: float) -> None:
        if t1 > t0 and self._cordoned:
            used = self.sim.fleet.bitmap.node_used_gpus
            for d in self._cordoned:
                busy = int(used[self._node_start[d] : self._node_start[d + 1]].sum())
                self.rollout.idle_gpu_s += max(0, int(self._capacity[d]) - busy) * (t1 - t0)

    # ------------------------------------------------------------------ the rollout

    def _begin_step(self, now: float) -> None:
        k = self.settings_m.k
        if self.settings_m.order == "naive":
            batch = [(name, now, frozenset[int]()) for name in self._left[:k]]
        else:
            plan = planner.plan_maintenance(self._ask(now), self._works(now))
            self.rollout.plans[plan.method] += 1
            if self.rollout.first_plan_lost_gpu_h is None:
                self.rollout.first_plan_lost_gpu_h = plan.lost_gpu_h
                self.rollout.first_plan_naive_gpu_h = plan.naive_lost_gpu_h
            first = plan.steps[0]
            batch = [(ds.domain, max(now, ds.drain_s), frozenset(int(w) for w in ds.waits_for)) for ds in first.domains]
        for name, drain_s, waits in batch:
            d = self._index[name]
            self._left.remove(name)
            record = DomainRecord(name, self._steps, now, drain_s, waits)
            self.rollout.domains.append(record)
            lo, hi = int(self._node_start[d]), int(self._node_start[d + 1])
            self._cordoned[d] = _Cordon(record, self._still_on(d, set(self.sim._booked)))
            bm = self.sim.fleet.bitmap
            for node in range(lo, hi):
                bm.set_usable(node, False)
        self.sim._usable_gpus = int(self.sim.fleet.bitmap.domain_usable_gpus.sum())
        self._steps += 1
        self.rollout.most_out = max(self.rollout.most_out, len(self._cordoned) + len(self._out))

    def _ask(self, now: float) -> planner.MaintenanceAsk:
        m = self.settings_m
        domains = {name: int(self._capacity[self._index[name]]) for name in self._left}
        window_end = self.rollout.begin_s + m.window_s if m.window_s is not None else None
        return planner.MaintenanceAsk(domains, now, m.step_s, m.k, m.max_wait_s, window_end)

    def _works(self, now: float) -> list[planner.Work]:
        """The running jobs on the domains left, as a cluster knows them (module docstring)."""
        left = {self._index[name] for name in self._left}
        every = self.failures.settings.checkpoint_s
        out = []
        for j in sorted(self.sim._booked):
            gang, nodes, _ = self.sim._booked[j]
            placement: Counter[str] = Counter()
            for node, gpus in zip(nodes.tolist(), gang.pod_gpus(), strict=True):
                if node >= 0:
                    placement[self.sim.fleet.domain_ids[int(self.sim.fleet.node_domain[node])]] += gpus
            if not any(self._index[name] in left for name in placement):
                continue
            p = self.failures.progress[j]
            expected = self._estimates.of(j)
            end = self._run_began[j] + expected if expected is not None else None
            out.append(
                planner.Work(
                    str(j),
                    gang.gpus,
                    dict(placement),
                    p.computing_from if math.isfinite(p.computing_from) else now,
                    end if end is not None and end > now else None,  # past its estimate: no known end
                    every if every > 0 else None,
                    pods=gang.pods,
                )
            )
        return out

    def _still_on(self, d: int, jobs: set[int]) -> set[int]:
        """Those of ``jobs`` with a pod on a node of domain ``d`` now."""
        lo, hi = int(self._node_start[d]), int(self._node_start[d + 1])
        out = set()
        for j in jobs:
            booked = self.sim._booked.get(j)
            if booked is not None and bool(((booked[1] >= lo) & (booked[1] < hi)).any()):
                out.add(j)
        return out

    def _drain(self, d: int, running: set[int], now: float) -> None:
        """Kill what still runs on ``d`` (each job back to its checkpoint and its queue); ``d`` is out for a step."""
        record = self._cordoned.pop(d).record
        for j in sorted(running):
            gang = self.sim._booked[j][0]
            self.rollout.lost_gpu_s += self.failures.halt(j, gang, self.failures.progress[j], now)
            self.failures.requeue(j)
            record.killed.append(j)
        record.drained_s = now
        self._out[d] = record

    def _uncordon(self, d: int) -> None:
        bm = self.sim.fleet.bitmap
        down = self.failures.clock.down
        for node in range(int(self._node_start[d]), int(self._node_start[d + 1])):
            if self._was_usable[node] and node not in down:
                bm.set_usable(node, True)
        self.sim._usable_gpus = int(bm.domain_usable_gpus.sum())


def rollout_metrics(part: Maintenance) -> dict[str, Any]:
    """What the rollout cost (module docstring), GPU-hours and hours rounded to 0.1."""
    r = part.rollout
    m = part.settings_m
    killed = [j for d in r.domains for j in d.killed]
    end = r.end_s
    done = len(r.domains) == len(part.sim.fleet.domain_ids) and not np.isnan(end)
    out: dict[str, Any] = {
        "maintenanceOrder": r.order,
        "domainsMaintained": sum(1 for d in r.domains if not np.isnan(d.back_s)),
        "steps": len({d.step for d in r.domains}),
        "jobsKilled": len(killed),
        "distinctJobsKilled": len(set(killed)),
        "gpuHoursLostToMaintenance": round(r.lost_gpu_s / 3600, 1),
        "gpuHoursIdleCordoned": round(r.idle_gpu_s / 3600, 1),
        "rolloutBeganSeconds": round(r.begin_s, 1),
        "rolloutHours": round((end - r.begin_s) / 3600, 2) if done else None,
        "mostDomainsOut": r.most_out,
    }
    if m.window_s is not None:
        out["withinWindow"] = bool(done and end <= r.begin_s + m.window_s)
    if r.order == "kilter":
        out["plans"] = dict(sorted(r.plans.items()))
        out["firstPlanLostGpuHours"] = round(r.first_plan_lost_gpu_h or 0.0, 1)
        out["firstPlanNaiveLostGpuHours"] = round(r.first_plan_naive_gpu_h or 0.0, 1)
    return out

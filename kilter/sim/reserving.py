"""Reservations with backfill as the simulator runs them for kilter: the oldest waiting gang goes next, the others
go around it.

Under kilter's rule a gang that would split on a saturated fleet waits for
its fewest domains, holding nothing (``split_hold``); so does a gang that
fits nowhere yet. Without more, smaller jobs keep taking the room it waits
for (Kueue's BestEffortFIFO skips a head that does not fit), and it may
wait for days. Here the oldest such gang of each ClusterQueue, any gang of
more than one pod, gets a reservation (``topology.reservations``, the same
functions the servers call): the domains the running jobs' expected ends
free soonest, from a start time. Any other job the policy places is
checked against it: it may start where it delays no reservation (it is
expected to end first, or takes only room the reservation leaves), else it
is steered to other domains, else it waits. That is EASY backfill (one
reservation per queue, as in Lifka's scheduler), at domain granularity;
Slurm's own backfill (``slurm_backfill``) reserves for every job it tests,
which bounds every wait and lengthens the mean.

A reservation has a price, as a split has: the room it keeps from the
jobs behind it. While jobs have queued all along a span as long as the
gang's expected run (``split_wait.QueueLoad.saturated``, the split price's
own test), that room comes out of a backlog that outlasts it, and no gang
gets one; it waits as a required gang waits in Kueue. Measured on the
Philly trace with 40 racks, reserving on a saturated fleet too made every
job class but the multi-rack gangs wait longer (mean wait 4,130 s against
3,163 s), while on 48 racks and on the Helios trace it paid (the
comparison is in ``docs/simulation.md``).

Expected ends are what the cluster would know: each running job's start
plus its runtime estimate at its start (``split_hold.RuntimeEstimates``;
a job without one never frees its nodes, so nothing is promised on them),
and for a job past its estimate, as long again as it has run. A
reservation is revised when it comes due and its gang still cannot start
(a job overran), and made anew when its owner starts or changes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from kilter.sim.gangs import Gang
from kilter.sim.parts import Part
from kilter.sim.placement import Nodes
from kilter.sim.split_hold import SplitHold
from kilter.topology import backfill
from kilter.topology import reservations as rs
from kilter.topology.fleet import Fleet

if TYPE_CHECKING:
    from kilter.sim.engine import Simulation

__all__ = ["Reserving", "Steerable"]


@runtime_checkable
class Steerable(Protocol):
    """A policy that can place a gang on some nodes only (``node_ok``: 1 = may use), as kilter's planner can:
    what backfill needs to steer a job around a reservation."""

    def place_on(self, fleet: Fleet, gang: Gang, node_ok: npt.NDArray[np.uint8]) -> Nodes | None: ...


class Reserving(Part):
    """The run's reservations, one per ClusterQueue at most, and what they came to (module docstring)."""

    def __init__(self, sim: Simulation, hold: SplitHold, policy: Steerable) -> None:
        self.sim = sim
        self.hold = hold
        self.policy = policy
        n = sim.fleet.n_nodes
        self._node_start = np.zeros(n)
        self._node_estimate = np.full(n, math.inf)  # of the job on it expected to leave last
        self._jobs_on = np.zeros(n, np.int64)
        self._nodes_of: dict[int, npt.NDArray[np.int32]] = {}
        self.held: dict[str, rs.Reservation] = {}  # ClusterQueue -> its oldest waiting gang's reservation
        self._promised: dict[int, float] = {}  # owner -> the start first promised to it
        self.owners: set[int] = set()  # every job that ever held a reservation
        self.start_errors: list[float] = []  # owners' starts less their first promise (late > 0)
        self.made = 0
        self.backfilled = 0  # jobs started in a reserved domain ahead of its reservation
        self.steered = 0  # jobs planned again away from reserved domains
        self.turned_away = 0  # placements refused because they would delay a reservation
        self.refused_now = False  # the last ``check`` refused a plan for a reservation's sake

    # ------------------------------------------------------------------ the engine's moments

    def started(self, j: int, gang: Gang, nodes: Nodes, now: float) -> None:
        estimate = self.hold.estimates.of(j)
        est = math.inf if estimate is None else estimate
        mine = np.unique(nodes[nodes >= 0])
        self._nodes_of[j] = mine
        fresh = self._jobs_on[mine] == 0
        later = fresh | (self._node_start[mine] + self._node_estimate[mine] < now + est)
        self._node_start[mine[later]] = now
        self._node_estimate[mine[later]] = est
        self._jobs_on[mine] += 1
        promised = self._promised.pop(j, None)
        if promised is not None:
            self.start_errors.append(now - promised)
        for cq, r in list(self.held.items()):
            if r.owner == str(j):
                del self.held[cq]

    def finished(self, j: int) -> None:
        mine = self._nodes_of.pop(j, None)
        if mine is not None:
            self._jobs_on[mine] -= 1

    def before_schedule(self, now: float) -> None:
        """Give each ClusterQueue's oldest waiting gang its reservation, or revise one come due."""
        sim = self.sim
        owners = []
        for cq in sim.cq_names:
            j = self._oldest_gang(cq, now)
            r = self.held.get(cq)
            if j is None:
                self.held.pop(cq, None)
                continue
            if r is not None and r.owner == str(j) and r.start_s > now:
                continue
            self.held.pop(cq, None)
            owners.append((j, cq))
        for j, cq in sorted(owners):
            made = self._reserve(j, cq, now)
            if made is not None:
                self.held[cq] = made
                self.made += 1
                self._promised.setdefault(j, made.start_s)
                self.owners.add(j)

    # ------------------------------------------------------------------ placement

    def check(self, gang: Gang, nodes: Nodes, now: float) -> Nodes | None:
        """``nodes`` if starting the gang there delays no reservation of another's; else the policy's plan away from
        the reserved domains when it delays none; else None (it waits)."""
        self.refused_now = False
        others = [r for r in self.held.values() if r.owner != str(gang.job)]
        if not others:
            return nodes
        space = rs.node_space(self.sim.fleet, gang.platform)
        estimate = self.hold.estimates.of(gang.job)
        end = math.inf if estimate is None else now + estimate
        pods = np.asarray(gang.pod_gpus(), np.int64)

        def replan(node_ok: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
            steered = self.policy.place_on(self.sim.fleet, gang, np.ascontiguousarray(node_ok, dtype=np.uint8))
            return None if steered is None else (steered.astype(np.int64), pods)

        found = backfill.steer(
            nodes.astype(np.int64), pods, end, space, self._holdings(now), others, now, str(gang.job), replan
        )
        self.backfilled += found.outcome is backfill.Outcome.BACKFILLED
        self.steered += found.outcome is backfill.Outcome.STEERED
        if found.nodes is None:
            self.turned_away += 1
            self.refused_now = True
            return None
        return found.nodes.astype(nodes.dtype)

    # ------------------------------------------------------------------ reading

    def metrics(self) -> dict[str, Any]:
        errors = np.asarray(self.start_errors)
        late = errors[errors > 0] if len(errors) else errors
        return {
            "reservationsMade": self.made,
            "reservedGangsStarted": len(errors),
            "jobsBackfilled": self.backfilled,
            "jobsSteered": self.steered,
            "placementsTurnedAway": self.turned_away,
            "startErrorSeconds": {
                "mean": round(float(errors.mean()), 1) if len(errors) else 0.0,
                "p50": round(float(np.percentile(errors, 50)), 1) if len(errors) else 0.0,
                "p95": round(float(np.percentile(errors, 95)), 1) if len(errors) else 0.0,
                "lateShare": round(len(late) / len(errors), 4) if len(errors) else 0.0,
            },
        }

    def _oldest_gang(self, cq: str, now: float) -> int | None:
        """The oldest waiting job of ``cq`` whose gang has more than one pod on its queue's first platform, when a
        reservation is worth its price: never while jobs have queued all along a span as long as its expected run
        (``split_wait.QueueLoad.saturated``), when the room it would keep from them comes out of a backlog that
        outlasts it, as a split's GPU-time would."""
        sim = self.sim
        pairs = sim.queues.flavors[cq]
        if not pairs:
            return None
        per_node = sim.fleet.platforms[pairs[0][0]].gpus_per_node
        heads = [(fifo[0], size) for size, fifo in sim._pending[cq].items() if fifo and size > per_node]
        if not heads:
            return None
        j, size = min(heads)
        load = self.hold.load(now, self.hold.estimates.of(j), sim.jobs[j].submit_s)
        return j if backfill.worth_keeping(size, per_node, load) else None

    def _reserve(self, j: int, cq: str, now: float) -> rs.Reservation | None:
        sim = self.sim
        platform = sim.queues.flavors[cq][0][0]
        gang = sim._gang(j, platform)
        k = self.hold.fewest_domains(gang) if gang.topology == "preferred" else 1
        space = rs.node_space(sim.fleet, platform)
        earlier = list(self.held.values())
        return rs.earliest_start(
            str(j), gang.pod_sets, k, space, self._holdings(now), earlier, now, self.hold.estimates.of(j)
        )

    def _holdings(self, now: float) -> rs.Holdings:
        """Every busy node as one holding row, expected to free when the job on it expected to leave last does."""
        used = self.sim.fleet.bitmap.node_used_gpus
        busy = np.flatnonzero(used > 0)
        ends = rs.expected_ends(self._node_start[busy], self._node_estimate[busy], now)
        return rs.Holdings(busy.astype(np.int64), used[busy].astype(np.int64), ends)

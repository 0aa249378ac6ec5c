"""One region of ``regions``' pool: a whole simulation stepped from outside, copies of jobs offered and withdrawn.

The pool (``regions``) moves the shared clock and decides where copies of a
waiting job go; each region queues its copies, admits them as its
configuration says (Kueue's cycles, or Volcano's session:
``compose.admission_for``) and reports what started. A job that starts away
from its home pays the dispatch delay (``regions``' module docstring).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from kilter.sim.compose import admission_for
from kilter.sim.engine import UNBOUNDED, SimConfig, Simulation
from kilter.sim.gangs import Gang
from kilter.sim.placement import Nodes, PlacementPolicy
from kilter.sim.queues import QueueSetup
from kilter.sim.trace import TraceJob
from kilter.topology.fleet import Fleet

__all__ = ["RegionalSimulation"]


class RegionalSimulation(Simulation):
    """One region's queues and placement, stepped from outside: copies of jobs are offered and withdrawn, and a
    job starting away from its home pays the dispatch delay (module docstring)."""

    def __init__(
        self,
        name: str,
        fleet: Fleet,
        jobs: Sequence[TraceJob],
        policy: PlacementPolicy,
        queues: QueueSetup,
        config: SimConfig,
        *,
        home: Sequence[str],
        delay_s: float,
    ) -> None:
        super().__init__(fleet, jobs, policy, queues, config, admission=admission_for(config))
        self.name = name
        self.usable_gpus = int(fleet.bitmap.domain_usable_gpus.sum())
        self.version = 0  # grows whenever a gang starts or ends here: the room summary is stale
        self._home = home
        self._delay_s = delay_s
        self._queued: set[int] = set()
        self._started: list[int] = []
        self._clock = 0.0
        self._find_never()

    def could_ever_run(self, j: int) -> bool:
        """Job ``j`` fits this region's idle fleet with its queue's whole reach."""
        return j not in self.outcome.never

    def offer(self, j: int) -> bool:
        """Queue a copy of job ``j`` here; False when one is queued already or it could never run here."""
        if j in self._queued or not self.could_ever_run(j):
            return False
        self._enqueue(j)
        self._queued.add(j)
        return True

    def withdraw(self, j: int) -> None:
        """Take job ``j``'s copy away (it started elsewhere, or is no longer sent here), with any quota it held."""
        if j not in self._queued:
            return
        self._queued.discard(j)
        if not self.admission.withdraw(j):  # Volcano's session holds what it enqueued; the rest is queued here
            self._unqueue(self.cq_of[j], j)
        self._waiting -= 1
        if self.hold is not None:
            self.hold.parked.discard(j)
            held = self.hold.reserved.pop(j, None)
            if held is not None:
                self._uncharge(j, self.cq_of[j], fr=held, gpus=self.jobs[j].gpus)
                self._place_bound.clear()
                self._cq_bound.update(dict.fromkeys(self.cq_names, UNBOUNDED))

    def next_event_s(self) -> float:
        """When a gang may end here or a held gang's budget runs out (a stale end is a harmless extra stop)."""
        end = self._running[0][0] if self._running else math.inf
        return min(end, self.hold.next_wake() if self.hold is not None else math.inf)

    def advance(self, now: float) -> bool:
        """Move this region's clock to ``now``: account the time, end the gangs due. Did any end?"""
        self._account(self._clock, now)
        if now > self._clock:
            self._evicted_now.clear()
        self._clock = now
        if self.hold is not None and self.hold.wake(now):
            self._cq_bound.update(dict.fromkeys(self.cq_names, UNBOUNDED))
        ended = False
        while self._running and self._running[0][0] <= now:
            end, j = heapq.heappop(self._running)
            if j not in self._booked or self.outcome.end[j] != end:
                continue
            self._finish(j)
            if self.hold is not None:
                self.hold.finished(j, float(self.outcome.run[j]))
            ended = True
        return ended

    def schedule(self, now: float) -> list[int]:
        """Run this region's admission at ``now``; the jobs that started here."""
        self._started = []
        self._schedule(now)
        return self._started

    def is_busy(self) -> bool:
        return bool(self._waiting or self._booked)

    def _start(self, j: int, gang: Gang, nodes: Nodes, cq: str, fr: tuple[str, str], now: float) -> None:
        super()._start(j, gang, nodes, cq, fr, now)
        self.version += 1
        self._queued.discard(j)
        self._started.append(j)
        if self._home[j] == self.name or self._delay_s <= 0:
            return
        o = self.outcome
        o.start[j] += self._delay_s
        o.end[j] += self._delay_s
        heapq.heappush(self._running, (float(o.end[j]), j))  # the entry without the delay is now stale
        held_s = float(o.end[j]) - now
        useful = gang.gpus * self.jobs[j].duration_s / held_s if held_s > 0 else 0.0
        self._useful += useful - self._weight[j]
        self._weight[j] = useful

    def _finish(self, j: int) -> None:
        super()._finish(j)
        self.version += 1

"""What a run is made of besides the engine: one admission step, and any number of parts that add events.

A run is ``engine.Simulation`` with the parts its configuration asks for
(``compose.build``), never a subclass per combination:

* ``AdmissionStep``: who decides which waiting job starts, on each scheduling
  pass, and what a start charges: Kueue's cycles (``kueue_cycles``, the
  default) or Volcano's session (``volcano_engine``).
* ``Part``: something that happens to the fleet and the gangs on it besides
  arrivals and ends: node failures (``failing``), a maintenance rollout
  (``maintenance``). Each part has its own events and is told of the engine's
  moments (a gang started, ended, ran to its end; capacity grew; time passed),
  in the order the parts were added, after the engine has done its own part
  of each.

Parts and admissions are the engine's collaborators: they read and book the
engine's state (its booked gangs, its counters) directly, as its own methods
do; the engine calls them only at the moments named here.
"""

from __future__ import annotations

import math
from typing import Protocol

from kilter.sim.gangs import Gang
from kilter.sim.placement import Nodes

__all__ = ["UNBOUNDED", "AdmissionStep", "Part", "PlacementCheck"]

UNBOUNDED = 1 << 62  # no job has failed yet: every size may be tried


class AdmissionStep(Protocol):
    """One scheduling pass, and what a start books against quota and an end gives back."""

    def schedule(self, now: float) -> None: ...

    def charge(self, j: int, cq: str, *, fr: tuple[str, str], gpus: int) -> None: ...

    def uncharge(self, j: int, cq: str, *, fr: tuple[str, str], gpus: int) -> None: ...

    def capacity_grew(self) -> None: ...

    def withdraw(self, j: int) -> bool:
        """Take waiting job ``j`` back (its copy started in another region): True when the admission held it itself
        (Volcano's enqueued jobs, charged to their queue), False when it waits in the engine's queue."""
        ...


class Part:
    """Events a run adds, and what it does at the engine's moments; every hook does nothing unless overridden."""

    def next_event_s(self) -> float:
        """When this part's next event is due (inf: none)."""
        return math.inf

    def on_events(self, now: float) -> None:
        """The events due at ``now``, after the gangs ending at ``now`` ended, before arrivals queue."""

    def holding(self) -> bool:
        """Gangs hold nodes or wait for them outside the queue and the running heap, or the part is not done: the
        run goes on."""
        return False

    def before_schedule(self, now: float) -> None:
        """Just before the admission's pass at ``now`` (what waits outside the queue goes first)."""

    def started(self, j: int, gang: Gang, nodes: Nodes, now: float) -> None:
        """Job ``j`` started on ``nodes`` (the engine has booked it)."""

    def finished(self, j: int) -> None:
        """Job ``j``'s gang left its nodes: it ended, was preempted or was evicted (the engine has released it)."""

    def ran_to_end(self, j: int) -> None:
        """Job ``j`` ran to its end (an eviction is no end)."""

    def capacity_grew(self) -> None:
        """What did not fit may fit now."""

    def account(self, t0: float, t1: float) -> None:
        """Time passed from ``t0`` to ``t1`` (the engine has accounted it, or found nothing present)."""


class PlacementCheck(Protocol):
    """What may veto or move a placement the policy found (kilter's reservations, ``reserving``): the nodes the
    gang may start on now, or None; ``refused_now`` says the last call found room but kept the gang off it."""

    refused_now: bool

    def check(self, gang: Gang, nodes: Nodes, now: float) -> Nodes | None: ...

"""Node failures as the simulator injects them, and the settings of ``kilter simulate --node-mtbf``.

Each node that is usable when the run starts fails as a Poisson process
with mean time between failures ``node_mtbf_h`` hours: it is up for an
exponentially distributed time, then down (unusable, its pods gone) for
``repair_h`` hours, then up again, and so on. Nodes that start cordoned or
NotReady stay so. Every node's draws come from one generator seeded by
``seed``, taken in event order, so every policy of a comparison sees the same
failures at the same times: the failure process does not depend on what runs
where, and no policy is told when the next one comes.

What a failure costs a gang, and how each policy recovers, is in ``failing``.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

__all__ = [
    "DEFAULT_RESTART_S",
    "FAILURE_POLICIES",
    "FailureClock",
    "FailurePolicy",
    "FailureSettings",
    "NoFailures",
    "NodeClock",
]

FailurePolicy = Literal["kilter", "kilter-replan", "kueue-tas", "requeue"]
FAILURE_POLICIES: tuple[FailurePolicy, ...] = ("kilter", "kilter-replan", "kueue-tas", "requeue")
DEFAULT_RESTART_S = 300.0


@dataclass(frozen=True)
class FailureSettings:
    """How often nodes fail and for how long, how often gangs checkpoint, and who recovers them.

    ``checkpoint_s`` is the run time between two checkpoints of a gang (0: it
    never checkpoints, a failure loses all its work). ``restart_s`` is the time
    from a gang having all its nodes again to it computing again (pods start,
    the job reloads its checkpoint), the same for every policy: a pod's start
    time is not the scheduler's to improve. ``policy`` None means the placement
    policy's own (``kilter``, ``kueue-tas``), and ``requeue`` for the others.
    """

    node_mtbf_h: float
    repair_h: float = 24.0
    checkpoint_s: float = 1800.0
    restart_s: float = DEFAULT_RESTART_S
    policy: FailurePolicy | None = None
    seed: int = 0

    def policy_for(self, placement: str) -> FailurePolicy:
        if self.policy is not None:
            return self.policy
        if placement == "kilter":
            return "kilter"
        return "kueue-tas" if placement.startswith("kueue-tas") else "requeue"


class FailureClock(Protocol):
    """Where a simulation learns when nodes fail and return: ``NodeClock``, or a script of events in a test."""

    down: set[int]

    def next_s(self) -> float: ...

    def pop(self) -> tuple[float, int, bool]: ...


class NoFailures:
    """The failure clock of a run whose nodes never fail (a rollout without ``--node-mtbf``)."""

    def __init__(self) -> None:
        self.down: set[int] = set()

    def next_s(self) -> float:
        return math.inf

    def pop(self) -> tuple[float, int, bool]:
        raise IndexError("no node fails")


class NodeClock:
    """When each node next fails or comes back: one heap of (time, node), a node's next event drawn as it fires."""

    def __init__(self, usable: npt.NDArray[np.bool_], settings: FailureSettings) -> None:
        self._rng = np.random.default_rng(settings.seed)
        self._mtbf_s = settings.node_mtbf_h * 3600.0
        self._repair_s = settings.repair_h * 3600.0
        nodes = np.flatnonzero(usable)
        first = self._rng.exponential(self._mtbf_s, len(nodes))
        self._heap: list[tuple[float, int]] = list(zip(first.tolist(), nodes.tolist(), strict=True))
        heapq.heapify(self._heap)
        self.down: set[int] = set()

    def next_s(self) -> float:
        return self._heap[0][0] if self._heap else math.inf

    def pop(self) -> tuple[float, int, bool]:
        """The next event: its time, its node, and whether the node fails (True) or comes back (False)."""
        t, node = heapq.heappop(self._heap)
        if node in self.down:
            self.down.discard(node)
            heapq.heappush(self._heap, (t + float(self._rng.exponential(self._mtbf_s)), node))
            return t, node, False
        self.down.add(node)
        heapq.heappush(self._heap, (t + self._repair_s, node))
        return t, node, True

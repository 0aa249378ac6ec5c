"""The seam between the simulator and a placement policy, and what every policy may read.

A policy answers one question: on which nodes would this gang's pods go
right now? It reads the fleet (never changes it; the simulator books the
answer) and returns one node index per pod, pod sets in order, or None when
the gang does not fit as the policy places. The gang's ``topology`` is the
request every policy sees; a policy that cannot honour a ``required``
request returns None rather than breaking it.

Two more questions a policy may answer. ``Asking``: how its operators
configure a job of this shape (Kueue TAS's recommended annotations, Volcano's
``highestTierAllowed``, Slurm's ``--segment``), asked once per gang when the
run lets every policy ask for itself (``--topology-request auto``).
``WaitingPolicy``: whether kilter's split-wait rule stands in front of it (kilter
itself, and Kueue TAS behind kilter's AdmissionCheck).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from kilter.sim.gangs import Gang
from kilter.topology.fleet import Fleet

__all__ = [
    "Asking",
    "Nodes",
    "PerPlatform",
    "PlacementPolicy",
    "Releasing",
    "WaitingPolicy",
    "free_gpus",
    "waits_for_fewer_domains",
]

Nodes = npt.NDArray[np.int32]
T = TypeVar("T")


class PlacementPolicy(Protocol):
    name: str

    def place(self, fleet: Fleet, gang: Gang) -> Nodes | None: ...


@runtime_checkable
class Releasing(Protocol):
    """A policy that keeps state of its own about placed gangs (a real extender does): told when a job's pods go,
    and, after a what-if release (a preemption that would not let its preemptor start), that they are back."""

    def release(self, job: int) -> None: ...

    def restore(self, job: int) -> None: ...


@runtime_checkable
class Asking(Protocol):
    """A policy whose operators configure each job's request by its shape: ``ask`` returns the gang as its job would
    be submitted (same pods, its own ``topology``, ``level`` and ``slices``), judged on the fleet as built (which
    domains exist and are healthy), never on what is busy now."""

    def ask(self, fleet: Fleet, gang: Gang) -> Gang: ...


@runtime_checkable
class WaitingPolicy(Protocol):
    """A policy behind kilter's split-wait rule (``split_hold``): a *preferred* gang whose plan spans more domains
    than it needs may be held for fewer."""

    waits_for_fewer_domains: bool


def waits_for_fewer_domains(policy: object) -> bool:
    return isinstance(policy, WaitingPolicy) and policy.waits_for_fewer_domains


def free_gpus(fleet: Fleet) -> npt.NDArray[np.int32]:
    """Free GPUs per node; 0 on nodes that are cordoned, NotReady or otherwise unusable."""
    bm = fleet.bitmap
    free = bm.node_gpu_counts - bm.node_used_gpus
    return np.where(bm.node_usable_flags != 0, free, 0).astype(np.int32)


class PerPlatform(Generic[T]):
    """What a policy derives from a platform's structure, built once per fleet: the structure never changes, only
    its usage does."""

    def __init__(self, build: Callable[[Fleet, int], T]) -> None:
        self._build = build
        self._fleet: Fleet | None = None
        self._made: dict[int, T] = {}

    def of(self, fleet: Fleet, platform: int) -> T:
        if fleet is not self._fleet:
            self._fleet, self._made = fleet, {}
        made = self._made.get(platform)
        if made is None:
            made = self._made[platform] = self._build(fleet, platform)
        return made

"""A trace job as the pods it runs: one node's GPUs per pod, all started together.

Trace jobs only say how many GPUs they held. On a platform with ``g`` GPUs
per node a job of ``G`` GPUs becomes ``G // g`` pods of ``g`` GPUs plus one
pod of the rest, so a small job is one pod and a big one fills whole nodes,
as a training job's launcher would lay it out. The same job has a different
shape on each platform, which is why a gang names its platform.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from kilter.topology.catalog import Platform
from kilter.topology.fleet import Fleet

__all__ = [
    "Gang",
    "RequestMode",
    "Slices",
    "TopologyMode",
    "domains_per_block",
    "gang_for",
    "resolved_mode",
]

TopologyMode = Literal["required", "preferred", "unconstrained"]
RequestMode = Literal["auto", "required", "preferred", "unconstrained"]
"""What a run asks of every gang: ``auto`` lets each policy ask as its operators would configure it (``placement.
Asking``); the other three force one request on every gang of every policy."""

Slices = tuple[tuple[int, int], ...]
"""Required slices of a gang's whole-node pod set, outermost first: (level, pods per slice), level as ``Gang.level``
numbers them; every slice's pods share one domain of that level (Kueue's ``podset-slice-required-topology`` with
``podset-slice-size``, or its multi-layer constraints; Slurm's ``--segment``)."""


@dataclass(frozen=True, slots=True)
class Gang:
    """Pods that start together on one platform of the fleet: pod sets of (count, GPUs per pod), and what they ask.

    ``topology`` applies at ``level``: 0 is the scale-up domain, k >= 1 the
    fleet's k-th group level above it (1 the block, 2 the spine), so
    ``required`` at level 1 is "any one block" (Volcano's
    ``highestTierAllowed: 2``). ``slices`` split the first pod set, the
    gang's whole-node pods; a pod set of one pod needs none.
    """

    job: int
    platform: int  # index into Fleet.platforms
    pod_sets: tuple[tuple[int, int], ...]
    topology: TopologyMode
    level: int = 0
    slices: Slices = ()

    @property
    def pods(self) -> int:
        return sum(count for count, _ in self.pod_sets)

    @property
    def gpus(self) -> int:
        return sum(count * gpus for count, gpus in self.pod_sets)

    def pod_gpus(self) -> list[int]:
        """GPUs of each pod, pod sets in order (the order a placement lists nodes in)."""
        return [gpus for count, gpus in self.pod_sets for _ in range(count)]


def gang_for(job: int, gpus: int, platform: Platform, platform_index: int, topology: TopologyMode) -> Gang:
    per_node = platform.gpus_per_node
    full, rest = divmod(gpus, per_node)
    sets = [(full, per_node)] if full else []
    if rest:
        sets.append((1, rest))
    return Gang(job, platform_index, tuple(sets), topology)


def resolved_mode(mode: RequestMode) -> TopologyMode:
    """The request a gang carries before its policy configures it: ``auto`` starts as ``preferred``."""
    return "preferred" if mode == "auto" else mode


def domains_per_block(fleet: Fleet) -> list[int]:
    """Per platform, the most domains one block holds (empty when the fleet has no block level)."""
    if not fleet.domain_group.shape[0]:
        return []
    out = []
    plats = fleet.bitmap.domain_platforms
    for i in range(len(fleet.platforms)):
        groups = fleet.domain_group[0, plats == i]
        groups = groups[groups >= 0]
        out.append(int(np.bincount(groups).max()) if len(groups) else 1)
    return out

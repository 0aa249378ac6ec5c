"""Each scale-up domain's room now: its free GPUs and the largest gang shape its nodes take.

A region publishes this per domain (``gangs.inventory``, carried to peers as
``regions.DomainRoom``), and the simulator's regions publish the same
(``sim.regions``), so a dispatcher ranks a simulated region by the very
numbers a live one would send. The shape is the most pods of the largest
size the domain's usable nodes take now: a whole node of its platform first,
then halves (4, 2, 1 for a 4-GPU node), down to 1 GPU; a domain with nothing
free shows (0 pods, a whole node).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kilter.topology.fleet import Fleet
from kilter.topology.regions import DomainRoom

__all__ = ["domain_rooms", "free_per_node", "halvings", "largest_shapes"]


def halvings(size: int) -> list[int]:
    """``size`` and its halves rounded down, largest first, down to 1 (``[8, 4, 2, 1]``, ``[6, 3, 1]``)."""
    return [size >> k for k in range(size.bit_length()) if size >> k]


def free_per_node(fleet: Fleet) -> npt.NDArray[np.int64]:
    """Free GPUs of each node; 0 on an unusable one (nothing is placed there)."""
    bm = fleet.bitmap
    free = bm.node_gpu_counts.astype(np.int64) - bm.node_used_gpus
    return np.where(bm.node_usable_flags != 0, free, 0)


def largest_shapes(fleet: Fleet, free: npt.NDArray[np.integer]) -> list[tuple[int, int]]:
    """Per domain, (pods, GPUs a pod) of the largest shape its nodes take given ``free`` GPUs per node: whole
    nodes of its platform first, then halves, down to 1 GPU; (0, whole node) when nothing is free."""
    bm = fleet.bitmap
    at = bm.domain_node_start[:-1]
    if not len(at):
        return []
    per_node = [p.gpus_per_node for p in fleet.platforms]
    plat_of = bm.domain_platforms
    fits = {s: np.add.reduceat(free // s, at) for s in sorted({s for g in per_node for s in halvings(g)})}
    pods = np.zeros(len(plat_of), dtype=np.int64)
    size = np.asarray(per_node, dtype=np.int64)[plat_of] if per_node else np.zeros(0, dtype=np.int64)
    for p, whole in enumerate(per_node):
        left = plat_of == p
        for s in halvings(whole):  # the largest size first: a domain takes the first one it fits a pod of
            found = left & (fits[s] > 0)
            pods[found], size[found] = fits[s][found], s
            left &= ~found
    return list(zip(pods.tolist(), size.tolist(), strict=True))


def domain_rooms(fleet: Fleet) -> tuple[DomainRoom, ...]:
    """Each domain's room now, in domain order: its platform, free GPUs on usable nodes and largest shape."""
    bm = fleet.bitmap
    at = bm.domain_node_start[:-1]
    if not len(at):
        return ()
    free = free_per_node(fleet)
    free_sum = np.add.reduceat(free, at).tolist()
    names = [fleet.platforms[p].name for p in bm.domain_platforms.tolist()]
    shapes = largest_shapes(fleet, free)
    return tuple(
        DomainRoom(name, gpus, pods, size) for name, gpus, (pods, size) in zip(names, free_sum, shapes, strict=True)
    )

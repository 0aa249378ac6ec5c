"""The Kueue TAS request that suits a pod set on rack-scale NVLink: the recipe operators follow, and kilter's webhook.

Kueue's TAS documentation and the NVL72 operators we read ask for a pod set
in one of two ways, judged on the fleet *as built* (every usable GPU idle):

* a pod set that one healthy scale-up domain holds asks for that domain as
  *required* (``podset-required-topology: <domain label>``): it waits for
  one rack rather than ever run split;
* a bigger one cannot, so it asks for *slices* (``podset-slice-required-
  topology: <domain label>``, ``podset-slice-size: s``): every ``s``
  consecutive pods share one domain, ``s`` the largest size that divides the
  pod count and that the idle fleet holds in whole slices, with the whole
  set only *preferred* close together.

Where a pod set is bigger than any block holds, Kueue >= 0.19's multi-layer
slices (``podset-slice-required-topology-constraints``, beta and on by
default) add an outer layer at the block level: chunks of ``S`` pods, ``S``
a multiple of ``s`` that divides the count, each in one block. Below that
size the outer layer changes nothing (the whole set's preference already
climbs to one block when one holds it), so the recipe adds it only there.

The simulator's ``kueue-tas`` baseline asks with this recipe. kilter's
mutating webhook fills in the same single-layer annotations, asking the
planner instead of counting, since it must also honour a pod set's node
selectors and the spares kilter holds out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kilter.topology.fleet import Fleet

__all__ = ["TasRecipe", "recipe"]


@dataclass(frozen=True, slots=True)
class TasRecipe:
    """How to ask for one pod set: ``required_domain``, else slices of ``slice_size`` pods (1: no size above one
    pod divides the count and fits, so slices say nothing) and, when ``block_slice_size`` > 0, outer slices of that
    many pods per block."""

    required_domain: bool
    slice_size: int = 0
    block_slice_size: int = 0


def _pods_per(groups: npt.NDArray[np.int64], pods: npt.NDArray[np.int64], n: int) -> npt.NDArray[np.int64]:
    return np.bincount(groups, weights=pods, minlength=n).astype(np.int64)


def _largest_fitting_divisor(count: int, caps: npt.NDArray[np.int64], *, multiple_of: int = 1) -> int:
    """The largest ``d`` < ``count``, a multiple of ``multiple_of`` dividing ``count``, such that the groups of
    ``caps`` pods each hold whole slices of ``d`` enough for all ``count // d``; 0 when none does."""
    for d in range(count - 1, 0, -1):
        if count % d or d % multiple_of:
            continue
        if int((caps // d).sum()) >= count // d:
            return d
    return 0


def recipe(fleet: Fleet, platform: int, count: int, gpus_per_pod: int) -> TasRecipe | None:
    """The request for ``count`` pods of ``gpus_per_pod`` GPUs on ``platform`` (module docstring), or None when the
    idle fleet cannot hold the pod set in any of these ways.

    A pod fits a node whole: a domain holds the sum over its usable nodes of
    ``gpus // gpus_per_pod`` pods, so slices of ``d`` fit where the domains'
    ``holds // d`` add up to the slices asked for. That count is exact, since
    pods on different nodes never compete.
    """
    if count <= 0 or gpus_per_pod <= 0:
        return None
    bm = fleet.bitmap
    node_domain = np.asarray(fleet.node_domain, dtype=np.int64)
    mine = (bm.node_usable_flags != 0) & (bm.domain_platforms[node_domain] == platform)
    pods = np.where(mine, bm.node_gpu_counts // gpus_per_pod, 0).astype(np.int64)
    n_domains = len(bm.domain_platforms)
    per_domain = _pods_per(node_domain, pods, n_domains)
    if int(per_domain.max(initial=0)) >= count:
        return TasRecipe(True)
    size = _largest_fitting_divisor(count, per_domain)
    if not size:
        return None
    outer = 0
    if fleet.domain_group.shape[0]:
        block = np.asarray(fleet.domain_group[0], dtype=np.int64)
        inside = block >= 0
        n_blocks = int(block.max(initial=-1)) + 1
        slices_per_block = np.bincount(block[inside], weights=(per_domain // size)[inside], minlength=n_blocks)
        if n_blocks and int(slices_per_block.max()) * size < count:
            outer = _largest_fitting_divisor(count, slices_per_block.astype(np.int64) * size, multiple_of=size)
    return TasRecipe(False, size, outer if outer > size else 0)

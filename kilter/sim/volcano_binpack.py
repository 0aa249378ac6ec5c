"""Volcano's network-topology-aware scheduling with binpack scoring, as a simulator baseline.

Follows volcano-sh/volcano at ed72c7c8 (v1.16.0-alpha.1-42):
``pkg/scheduler/actions/allocate/allocate.go`` (``allocateForJob``,
``allocateResourcesForTasks``), ``pkg/scheduler/plugins/network-topology-aware/
network_topology_aware.go`` (``hyperNodeGradientFn``,
``getSubJobHyperNodeBinPackingScore``) and ``pkg/scheduler/plugins/binpack/
binpack.go`` (``BinPackingScore``).

HyperNode tiers: 1 = scale-up domain, 2 = block (group level 0), 3 = spine
(group level 1), as HyperNode auto-discovery builds them from the fabric
labels. Hard mode walks the tiers allowed, lowest first; in each it dry-runs
the whole gang in every HyperNode and keeps, among those where every pod
fits, the one of highest binpack score ``(used + gang GPUs) / allocatable``,
so busy HyperNodes fill first and idle ones stay whole. Inside a HyperNode (or
the whole platform) pods go one by one to the node of highest binpack score
``(used + pod GPUs) / allocatable``; since a node's score only grows as it
fills, that is: fill the most allocated node that fits, then the next.

Requests map to: ``required`` at the gang's level = hard mode,
``highestTierAllowed`` = level + 1; ``preferred`` = the lowest tier with one
HyperNode that holds the whole gang, else the whole platform;
``unconstrained`` = no network topology, plain binpack over the platform's
nodes.

``VolcanoHyperNode`` is the setup an operator of rack-scale NVLink writes
into each Volcano Job (``spec.networkTopology``): hard mode,
``highestTierAllowed: 1`` (the scale-up domain) for a gang one healthy domain
holds, else the lowest tier one of whose HyperNodes holds the gang on the
fleet as built (tier 2, the block, for every gang a block holds). Hard mode
never places a gang beyond that tier: it waits instead.

Simplifications: GPUs are the only resource, with equal weights. Ties (Volcano
picks at random) go to the lowest HyperNode or node index. ``preferred`` is an
approximation: Volcano's soft mode places pod by pod over the whole cluster
and pulls later pods towards the lowest common HyperNode of those already
placed; the tiered search reaches the same "as close as fits" outcome without
modelling the weights of that score. The default HyperNode-level binpack for
pods without topology (``hypernode.binpack.normal-pod``) is left out. A node
whose clique label is missing belongs to no HyperNode, and only a one-pod gang
may use it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kilter.sim.gangs import Gang
from kilter.sim.kueue_tas import labelled_domains
from kilter.sim.placement import Nodes, PerPlatform, free_gpus
from kilter.topology.fleet import Fleet

__all__ = ["VolcanoBinpack", "VolcanoHyperNode", "hard_mode_level"]

Ints = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class _Tiers:
    """One platform's nodes and the HyperNode each belongs to at every tier (index 0 = tier 1; -1 = none)."""

    nodes: Ints  # fleet node indices of the platform, ascending
    attached: npt.NDArray[np.bool_]  # the node carries its scale-up-domain label (is not detached)
    member: tuple[Ints, ...]  # per tier: HyperNode id of each node, ids = domain or group index


def _build_tiers(fleet: Fleet, platform: int) -> _Tiers:
    bm = fleet.bitmap
    node_domain = np.asarray(fleet.node_domain, dtype=np.int64)
    nodes = np.flatnonzero(bm.domain_platforms[node_domain] == platform)
    domain = node_domain[nodes]
    attached = labelled_domains(fleet)[domain]
    member = [np.where(attached, domain, -1)]
    member += [np.where(attached, np.asarray(group, dtype=np.int64)[domain], -1) for group in fleet.domain_group]
    return _Tiers(nodes, attached, tuple(member))


def _binpack(free: Ints, allocatable: Ints, members: Ints, *, pod_sets: Sequence[tuple[int, int]]) -> Ints | None:
    """``allocateResourcesForTasks`` within ``members`` with the binpack node score: the node of each pod, or None.

    Books on ``free``, the caller's scratch copy (partly, when it fails).
    """
    out: list[Ints] = []
    for count, gpus in pod_sets:
        room = free[members]
        fits = np.flatnonzero(room >= gpus)
        score = (allocatable[members[fits]] - room[fits] + gpus) / allocatable[members[fits]]
        order = fits[np.argsort(-score, kind="stable")]  # most allocated first, ties to the lower index
        caps = room[order] // gpus
        total = np.cumsum(caps)
        if not len(total) or total[-1] < count:
            return None
        i = int(np.searchsorted(total, count))
        pods = caps[: i + 1].copy()
        pods[i] = count - (total[i] - caps[i])
        chosen = members[order[: i + 1]]
        free[chosen] -= pods * gpus
        out.append(np.repeat(chosen, pods))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


class VolcanoBinpack:
    """Volcano's allocate action with network-topology-aware HyperNode binpacking and the binpack node score."""

    name = "volcano-binpack"

    def __init__(self) -> None:
        self._tiers = PerPlatform(_build_tiers)

    def place(self, fleet: Fleet, gang: Gang) -> Nodes | None:
        t = self._tiers.of(fleet, gang.platform)
        bm = fleet.bitmap
        free = free_gpus(fleet)[t.nodes].astype(np.int64)
        allocatable = bm.node_gpu_counts[t.nodes].astype(np.int64)
        used = bm.node_used_gpus[t.nodes].astype(np.int64)  # Volcano counts unusable nodes in a HyperNode too
        pod_sets = [(c, g) for c, g in gang.pod_sets if c > 0]
        if gang.topology == "unconstrained":
            tiers: Sequence[Ints] = ()
        else:
            tiers = t.member[: gang.level + 1] if gang.topology == "required" else t.member
        for member in tiers:
            placed = self._in_best_hypernode(free, allocatable, used, member, pod_sets=pod_sets, gang_gpus=gang.gpus)
            if placed is not None:
                return t.nodes[placed].astype(np.int32)
        if gang.topology == "required":
            return None
        everywhere = np.arange(len(t.nodes)) if gang.pods == 1 else np.flatnonzero(t.attached)
        placed = _binpack(free, allocatable, everywhere, pod_sets=pod_sets)
        return None if placed is None else t.nodes[placed].astype(np.int32)

    @staticmethod
    def _in_best_hypernode(
        free: Ints, allocatable: Ints, used: Ints, member: Ints, *, pod_sets: Sequence[tuple[int, int]], gang_gpus: int
    ) -> Ints | None:
        """The gang in the HyperNode of one tier with the highest score where it fits whole (``allocateForJob``).

        The score does not depend on where the pods land, so HyperNodes are
        dry-run in score order and the first that holds the gang wins. Those
        that cannot (their idle GPUs or pod room fall short) are skipped first,
        as ``isEligibleHyperNode`` prefilters on idle resources.
        """
        inside = member >= 0
        hyper = member[inside]
        n = int(hyper.max()) + 1 if len(hyper) else 0
        cap_alloc = np.bincount(hyper, allocatable[inside], minlength=n)
        cap_used = np.bincount(hyper, used[inside], minlength=n)
        ok = np.bincount(hyper, free[inside], minlength=n) >= gang_gpus
        for count, gpus in pod_sets:
            ok &= np.bincount(hyper, free[inside] // gpus, minlength=n) >= count
        candidates = np.flatnonzero(ok & (cap_alloc > 0))
        score = (cap_used[candidates] + gang_gpus) / cap_alloc[candidates]
        for h in candidates[np.argsort(-score, kind="stable")]:
            members = np.flatnonzero(member == h)
            before = free[members].copy()
            placed = _binpack(free, allocatable, members, pod_sets=pod_sets)
            if placed is not None:
                return placed
            free[members] = before
        return None


def hard_mode_level(fleet: Fleet, gang: Gang) -> int | None:
    """The level ``VolcanoHyperNode`` asks for: 0 (tier 1) when one healthy domain holds the gang on the fleet as
    built, else the lowest group level one of whose groups does; None when none does (the gang cannot run there)."""
    bm = fleet.bitmap
    mine = (bm.node_usable_flags != 0) & (bm.domain_platforms[fleet.node_domain] == gang.platform)
    mine &= labelled_domains(fleet)[fleet.node_domain] | (gang.pods == 1)
    gpus = np.where(mine, bm.node_gpu_counts, 0).astype(np.int64)
    n_domains = len(bm.domain_platforms)
    per_pod = [np.bincount(fleet.node_domain, weights=gpus // g, minlength=n_domains) for _, g in gang.pod_sets]
    total = np.bincount(fleet.node_domain, weights=gpus, minlength=n_domains)
    members = [np.arange(n_domains), *(np.asarray(g, dtype=np.int64) for g in fleet.domain_group)]
    for level, member in enumerate(members):
        inside = member >= 0
        n = int(member.max(initial=-1)) + 1
        if not n:
            continue
        ok = np.bincount(member[inside], weights=total[inside], minlength=n) >= gang.gpus
        for (count, _), pods in zip(gang.pod_sets, per_pod, strict=True):
            ok &= np.bincount(member[inside], weights=pods[inside], minlength=n) >= count
        if ok.any():
            return level
    return None


class VolcanoHyperNode(VolcanoBinpack):
    """Volcano's network-topology-aware scheduling in hard mode, tiered as an operator of NVL72 racks sets it
    (module docstring), with the HyperNode binpack score."""

    name = "volcano-hypernode"

    def ask(self, fleet: Fleet, gang: Gang) -> Gang:
        level = hard_mode_level(fleet, gang)
        if level is None:  # no tier holds it: what it asks cannot matter, it never starts
            return dataclasses.replace(gang, topology="required", level=0, slices=())
        return dataclasses.replace(gang, topology="required", level=level, slices=())

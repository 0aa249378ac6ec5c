"""kilter's own placement as the simulator runs it, and the two plainest baselines.

``KilterPlacement`` is the product: the gang planner of ``kilter.topology``
(the call the extender makes), asked with the job's topology request at the
scale-up-domain level. ``Spread`` is kube-scheduler's default scoring,
NodeResourcesFit with LeastAllocated: each pod, in turn, to a node with the
largest free share, ties broken at random as kube-scheduler's ``selectHost``
does (seeded here). ``FirstFit`` puts each pod on the first node, in name
order, with room. Neither baseline knows about domains; the gang rule (all
pods or none) is the simulator's, as Kueue or Volcano would enforce it.
"""

from __future__ import annotations

import heapq

import numpy as np
import numpy.typing as npt

from kilter.sim.gangs import Gang
from kilter.sim.placement import Nodes, free_gpus
from kilter.topology import plan
from kilter.topology.fleet import Fleet

__all__ = ["FirstFit", "KilterPlacement", "Spread", "platform_nodes"]


def platform_nodes(fleet: Fleet, platform: int) -> npt.NDArray[np.bool_]:
    """Which nodes belong to ``platform``."""
    return np.asarray(fleet.bitmap.domain_platforms[fleet.node_domain] == platform)


class KilterPlacement:
    """kilter's planner, every job asking its scale-up domain as preferred (what ``kilter.dev/topology: auto`` jobs
    get before kilter's split-wait rule, which stands in front of it, decides whether a split plan waits)."""

    name = "kilter"
    waits_for_fewer_domains = True

    def place(self, fleet: Fleet, gang: Gang) -> Nodes | None:
        if gang.topology == "required":
            return plan.place_pods(fleet, gang.platform, gang.pod_sets, required=plan.LEVEL_DOMAIN)
        if gang.topology == "preferred":
            return plan.place_pods(fleet, gang.platform, gang.pod_sets, preferred=plan.LEVEL_DOMAIN)
        return plan.place_pods(fleet, gang.platform, gang.pod_sets, preferred=plan.LEVEL_NONE)


class Spread:
    """Least allocated first; the topology request is ignored, as kube-scheduler ignores it.

    A node's score is its free share after taking the pod, on kube-scheduler's
    0-100 integer scale; among equal scores the choice is random, drawn from
    (seed, job), so a job's draw does not depend on how often others were tried.
    """

    name = "spread"

    def __init__(self, seed: int = 0) -> None:
        self._seed = seed

    def place(self, fleet: Fleet, gang: Gang) -> Nodes | None:
        free = np.where(platform_nodes(fleet, gang.platform), free_gpus(fleet), 0)
        capacity = np.maximum(fleet.bitmap.node_gpu_counts, 1)
        tiebreak = np.random.default_rng((self._seed, gang.job)).random(len(free))
        out: list[int] = []
        for count, need in gang.pod_sets:
            room = np.flatnonzero(free >= need)
            if len(room) == 0:
                return None
            scores = (free[room] - need) * 100 // capacity[room]
            heap = list(zip((-scores).tolist(), (-tiebreak[room]).tolist(), room.tolist(), strict=True))
            heapq.heapify(heap)
            for _ in range(count):
                if not heap:
                    return None
                _, tie, node = heapq.heappop(heap)
                free[node] -= need
                out.append(node)
                if free[node] >= need:
                    heapq.heappush(heap, (-int((free[node] - need) * 100 // capacity[node]), tie, node))
        return np.asarray(out, dtype=np.int32)


class FirstFit:
    name = "first-fit"

    def place(self, fleet: Fleet, gang: Gang) -> Nodes | None:
        free = np.where(platform_nodes(fleet, gang.platform), free_gpus(fleet), 0)
        out = np.empty(gang.pods, dtype=np.int32)
        for i, need in enumerate(gang.pod_gpus()):
            room = np.flatnonzero(free >= need)
            if not len(room):
                return None
            node = int(room[0])
            free[node] -= need
            out[i] = node
        return out

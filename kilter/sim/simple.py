"""kilter's own placement as the simulator runs it, and the two plainest baselines.

``KilterPlacement`` is the product: the gang planner of ``kilter.topology``
through the door every server uses (``plan.plan_gang``), asked with the job's
topology request at the scale-up-domain level. ``Spread`` is kube-scheduler's default scoring,
NodeResourcesFit with LeastAllocated: each pod, in turn, to a node with the
largest free share, ties broken at random as kube-scheduler's ``selectHost``
does (seeded here). ``FirstFit`` puts each pod on the first node, in name
order, with room. Neither baseline knows about domains; the gang rule (all
pods or none) is the simulator's, as Kueue or Volcano would enforce it.
"""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np
import numpy.typing as npt

from kilter.model.core_v1 import PodSpec, Toleration
from kilter.model.jobs import TopologyRequest
from kilter.sim.gangs import Gang
from kilter.sim.placement import Nodes, free_gpus
from kilter.topology import plan
from kilter.topology.fleet import Fleet

__all__ = ["FirstFit", "KilterPlacement", "Spread", "gang_request", "platform_nodes"]


def platform_nodes(fleet: Fleet, platform: int) -> npt.NDArray[np.bool_]:
    """Which nodes belong to ``platform``."""
    return np.asarray(fleet.bitmap.domain_platforms[fleet.node_domain] == platform)


class KilterPlacement:
    """kilter's planner, every job asking its scale-up domain as preferred (what ``kilter.dev/topology: auto`` jobs
    get before kilter's split-wait rule, which stands in front of it, decides whether a split plan waits)."""

    name = "kilter"
    waits_for_fewer_domains = True

    def __init__(self) -> None:
        self._requests: dict[tuple[str, tuple[tuple[int, int], ...], str], plan.GangRequest] = {}

    def place(self, fleet: Fleet, gang: Gang) -> Nodes | None:
        key = (fleet.platforms[gang.platform].name, gang.pod_sets, gang.topology)  # a trace repeats a few shapes
        request = self._requests.get(key)
        if request is None:
            if len(self._requests) >= 4096:
                self._requests.clear()
            request = self._requests[key] = gang_request(fleet, gang)
        return plan.plan_nodes(fleet, request)

    def place_on(self, fleet: Fleet, gang: Gang, node_ok: npt.NDArray[np.uint8]) -> Nodes | None:
        """The plan on the nodes ``node_ok`` allows only (steered around a reservation, ``reserving``)."""
        self.place(fleet, gang)  # the request, made and remembered
        key = (fleet.platforms[gang.platform].name, gang.pod_sets, gang.topology)
        return plan.plan_nodes(fleet, dataclasses.replace(self._requests[key], node_ok=node_ok))


_ANY_NODE = PodSpec(tolerations=(Toleration(operator="Exists"),))
"""A simulated pod's spec: no selector, and a toleration of every taint (a trace says nothing of either)."""

_LEVELS = {
    "required": (plan.LEVEL_DOMAIN, plan.LEVEL_DOMAIN),
    "preferred": (plan.LEVEL_NONE, plan.LEVEL_DOMAIN),
    "unconstrained": (plan.LEVEL_NONE, plan.LEVEL_NONE),
}


def gang_request(fleet: Fleet, gang: Gang) -> plan.GangRequest:
    """``gang`` as the planner's request: its pod sets on its platform, asking its scale-up domain as its topology
    says (``KilterPlacement``)."""
    platform = fleet.platforms[gang.platform]
    pod_sets = tuple(
        plan.PodSetRequest(f"set-{i}", count, gpus, TopologyRequest(), _ANY_NODE)
        for i, (count, gpus) in enumerate(gang.pod_sets)
    )
    return plan.GangRequest(
        f"{gang.pods}-pod gang", platform.device_resource, pod_sets, platform.name, levels=_LEVELS[gang.topology]
    )


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

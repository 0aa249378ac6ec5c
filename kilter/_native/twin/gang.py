"""Reference twin of ``kilter._native.gang``: the same planner door and scorer in plain Python."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kilter._native.twin import domainset, podsets
from kilter._native.twin.domains import DETACHED, FleetBitmap

OK = podsets.OK
NO_CAPACITY = podsets.NO_CAPACITY
REQUIRED_TOO_SMALL = podsets.REQUIRED_TOO_SMALL
SLICES_DO_NOT_FIT = podsets.SLICES_DO_NOT_FIT
NONE = podsets.NONE
NODE = podsets.NODE
DOMAIN = podsets.DOMAIN
UP = podsets.UP
MAX_SCORE = 10
_POD_LIMIT = 2**30  # pods in one gang, as the core's PLAN_POD_LIMIT


class PodSets:
    """A gang's pod sets as ``plan_gang`` reads them, checked once: rows of (count, gpus, required, preferred,
    slice_size, slice_level); planned most GPUs first, ties in input order."""

    def __init__(self, rows: Iterable[tuple[int, int, int, int, int, int]]) -> None:
        self.sets: list[podsets.PodSetAsk] = []
        self.total = 0
        self.top_level = NONE
        for i, row in enumerate(rows):
            count, gpus, required, preferred, slice_size, slice_level = (int(x) for x in row)
            if count <= 0 or gpus <= 0:
                raise ValueError(f"pod set {i}: count and gpus must be >= 1")
            for lv in (required, preferred, slice_level):
                if lv < NONE:
                    raise ValueError(f"pod set {i}: level {lv} below -1")
                self.top_level = max(self.top_level, lv)
            if slice_size <= 0 or count % slice_size != 0:
                raise ValueError(f"pod set {i}: slice size {slice_size} must divide count {count}")
            if self.total > _POD_LIMIT - count:
                raise ValueError("too many pods in one gang")
            self.sets.append(podsets.PodSetAsk(count, gpus, required, preferred, slice_size, slice_level, self.total))
            self.total += count
        self.n_sets = len(self.sets)
        self.order = sorted(range(self.n_sets), key=lambda i: -(self.sets[i].count * self.sets[i].gpus))

    def __len__(self) -> int:
        return self.n_sets


@dataclass(frozen=True)
class PlanResult:
    """What ``plan_gang`` answers (as ``gang.PlanResult``)."""

    status: int
    nodes: npt.NDArray[np.int32]
    need: int = 0
    offered: int = 0
    pod_set: int = -1
    level: int = -1

    @property
    def ok(self) -> bool:
        return self.status == OK


def plan_gang(
    fleet: FleetBitmap, pod_sets: PodSets, platform: int = -1, node_ok: npt.NDArray[np.uint8] | None = None
) -> PlanResult:
    return plan_gang_with(domainset.choose, fleet, pod_sets, platform, node_ok)


def plan_gang_with(
    choose: domainset.Chooser,
    fleet: FleetBitmap,
    pod_sets: PodSets,
    platform: int = -1,
    node_ok: npt.NDArray[np.uint8] | None = None,
) -> PlanResult:
    """plan_gang with another chooser of each pod set's domain set (tests pass a brute force)."""
    top = UP + fleet.n_levels
    for i, ps in enumerate(pod_sets.sets):
        for lv in (ps.required, ps.preferred, ps.slice_level):
            if lv >= top:
                raise ValueError(f"pod set {i}: level {lv} outside -1..{top - 1}")
    if node_ok is not None and len(node_ok) != fleet.n_nodes:
        raise ValueError("node_ok needs one entry per node")
    sc = podsets.Scratch(n=fleet.n_domains, cap_width=fleet.n_words * 64, choose=choose)
    out = [-1] * pod_sets.total
    miss = podsets.Shortfall()
    status, failed = podsets.run_plan(
        fleet, sc, pod_sets.sets, pod_sets.order, platform, pod_sets.total == 1, node_ok, out, miss
    )
    if status == OK:
        return PlanResult(status, np.array(out, dtype=np.int32))
    ps = pod_sets.sets[failed]
    level = ps.required if ps.required >= 0 else ps.slice_level
    return PlanResult(status, np.full(pod_sets.total, -1, dtype=np.int32), miss.need, miss.offered, failed, level)


def score_nodes(
    fleet: FleetBitmap,
    nodes: npt.ArrayLike,
    gpus: int,
    planned: npt.ArrayLike,
    out: npt.NDArray[np.int8],
) -> None:
    plan = [int(x) for x in np.asarray(planned).ravel()]
    if plan != sorted(plan):
        raise ValueError("planned must be sorted ascending")
    for i, raw in enumerate(np.asarray(nodes).ravel()):
        n = int(raw)
        if n < 0 or n >= fleet.n_nodes:
            out[i] = -1
            continue
        f = fleet.node_free(n)
        if not fleet.node_usable[n] or f < gpus:
            out[i] = 0
            continue
        j = bisect_left(plan, n)
        if j < len(plan) and plan[j] == n:
            out[i] = MAX_SCORE
            continue
        d = fleet.node_domain[n]
        if fleet.flags[d] & DETACHED:
            out[i] = 1
            continue
        single = fleet.node_start[d + 1] - fleet.node_start[d] == 1
        if single and fleet.n_levels > 0 and fleet.group[0][d] >= 0:
            g = fleet.group[0][d]
            tot = fleet.group_usable[0][g]
            used = tot - fleet.group_free[0][g]
        else:
            tot = fleet.domain_usable[d]
            used = tot - fleet.domain_free[d]
        s = 1 + (6 * used) // tot
        s += fleet.node_used[n] > 0
        s += not fleet.is_wholly_free(d)
        out[i] = s

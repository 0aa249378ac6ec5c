# cython: language_level=3
"""Gang planning and node scoring: the decisions of the topology core.

``plan_gang`` places every pod of a gang at once, or says why it cannot. Per
pod set it meets each required constraint and confines the pod set to the
group of a preferred level above the domain when one can hold it; then
``domainset.choose_set`` chooses the set of domains exactly: fewest scale-up
domains; fewest blocks, then spines ...; the least total capacity (best fit
of the set); fewest wholly idle domains used; the largest holes kept; then
idle GPUs and rank order. Each chosen domain is filled node by node, best
fit, and pods come out in rank order. The plan is a what-if: every booking
is undone before returning. Equals ``twin.gang.plan_gang``.

The gang comes in as ``PodSets`` (its pod sets, checked once) and the
answer goes out as a ``PlanResult`` (a node per pod, or the failure and
what the best candidate offered). This module is the door: it checks the
input against the fleet, allocates the working memory and reads the
answer; the steps themselves are in podsets.pyx, the domain-set search in
domainset.pyx.

``score_nodes`` ranks candidate nodes for one pod on kube-scheduler's 0..10
scale. Equals ``twin.gang.score_nodes``.
"""

import numpy as np

from libc.string cimport memset

from kilter._native._alloc cimport Pieces, alloc_pieces, free_pieces, want
from kilter._native._types cimport (
    DOMAIN_DETACHED,
    LEVEL_DOMAIN,
    LEVEL_NODE,
    LEVEL_NONE,
    LEVEL_UP,
    int8_t,
    int32_t,
    int64_t,
    uint8_t,
)
from kilter._native.domains cimport FleetBitmap
from kilter._native.podsets cimport (
    PLAN_NO_CAPACITY,
    PLAN_NO_MEMORY,
    PLAN_OK,
    PLAN_REQUIRED_TOO_SMALL,
    PLAN_SLICES_DO_NOT_FIT,
    PodSetAsk,
    Scratch,
    Shortfall,
    free_scratch,
    init_scratch,
    run_plan,
)

OK = PLAN_OK
NO_CAPACITY = PLAN_NO_CAPACITY
REQUIRED_TOO_SMALL = PLAN_REQUIRED_TOO_SMALL
SLICES_DO_NOT_FIT = PLAN_SLICES_DO_NOT_FIT
NONE = LEVEL_NONE
NODE = LEVEL_NODE
DOMAIN = LEVEL_DOMAIN
UP = LEVEL_UP
MAX_SCORE = PLAN_MAX_SCORE


# ---------------------------------------------------------------- planning

cdef class PodSets:
    """A gang's pod sets as ``plan_gang`` reads them, checked once.

    One row per pod set: (count, gpus, required, preferred, slice_size,
    slice_level): ``count`` pods of ``gpus`` GPUs; ``required``/``preferred``
    a level (-1 none, 0 node, 1 domain, 2+i the i-th level above); slices of
    ``slice_size`` pods, each confined to ``slice_level``. Whether a level
    exists in the fleet is checked by ``plan_gang``. Pod sets are planned
    most GPUs first, ties in input order.
    """

    def __cinit__(self, rows):
        cdef tuple table = tuple(rows)
        cdef int32_t n = len(table), i, j, lv
        cdef int64_t size_i, size_j
        cdef PodSetAsk* ps
        cdef Pieces p
        memset(&p, 0, sizeof(Pieces))
        want(&p, &self.sets, n, sizeof(PodSetAsk))
        want(&p, &self.order, n, sizeof(int32_t))
        self.memory = alloc_pieces(&p)
        self.top_level = LEVEL_NONE
        for i in range(n):
            ps = &self.sets[i]
            ps.count, ps.gpus, ps.required, ps.preferred, ps.slice_size, ps.slice_level = table[i]
            if ps.count <= 0 or ps.gpus <= 0:
                raise ValueError(f"pod set {i}: count and gpus must be >= 1")
            for lv in (ps.required, ps.preferred, ps.slice_level):
                if lv < LEVEL_NONE:
                    raise ValueError(f"pod set {i}: level {lv} below -1")
                self.top_level = max(self.top_level, lv)
            if ps.slice_size <= 0 or ps.count % ps.slice_size != 0:
                raise ValueError(f"pod set {i}: slice size {ps.slice_size} must divide count {ps.count}")
            if self.total > PLAN_POD_LIMIT - ps.count:
                raise ValueError("too many pods in one gang")
            ps.offset = self.total
            self.total += ps.count
            # Planning order: an insertion sort (gangs have few pod sets).
            j = i
            size_i = <int64_t>ps.count * ps.gpus
            while j > 0:
                size_j = <int64_t>self.sets[self.order[j - 1]].count * self.sets[self.order[j - 1]].gpus
                if size_j >= size_i:
                    break
                self.order[j] = self.order[j - 1]
                j -= 1
            self.order[j] = i
        self.n_sets = n

    def __dealloc__(self):
        free_pieces(self.memory)

    def __len__(self):
        return self.n_sets


cdef class PlanResult:
    """What ``plan_gang`` answers: ``status`` (``OK`` or why not), ``nodes`` (a node per pod, pod sets in input
    order, rank order within each; all -1 on failure) and, on failure, the failing ``pod_set``, the ``level`` it
    failed at (its required level, else its slice level), the pods it ``need``s and those the best candidate
    ``offered``."""

    @property
    def ok(self):
        return self.status == PLAN_OK


def plan_gang(FleetBitmap fleet, PodSets pod_sets not None, int32_t platform=-1, const uint8_t[::1] node_ok=None):
    """Plan a gang of pod sets on ``platform`` (-1: any) and the nodes ``node_ok`` marks (None: all usable ones).

    Pod sets are planned most GPUs first; later ones try the gang's domains
    before any other. Pod i of a pod set is rank i: the pod set's domains
    come in rank order (group path from the top level down, then domain
    index, i.e. name), a domain's pods together, and within it a node's pods
    together, nodes ascending. Slices above the domain are placed one by one
    and come whole, in rank order of their first domain.
    """
    cdef int32_t i, lv, status, failed = -1, top = LEVEL_UP + fleet.n_levels
    cdef int32_t total = pod_sets.total
    cdef const uint8_t* ok = NULL
    cdef const PodSetAsk* ps
    cdef Shortfall miss
    cdef Scratch sc
    cdef int32_t[::1] out
    cdef PlanResult result = PlanResult.__new__(PlanResult)
    if pod_sets.top_level >= top:
        for i in range(pod_sets.n_sets):
            ps = &pod_sets.sets[i]
            for lv in (ps.required, ps.preferred, ps.slice_level):
                if lv >= top:
                    raise ValueError(f"pod set {i}: level {lv} outside -1..{top - 1}")
    if node_ok is not None:
        if node_ok.shape[0] != fleet.n_nodes:
            raise ValueError("node_ok needs one entry per node")
        ok = &node_ok[0] if fleet.n_nodes else NULL
    result.nodes = np.empty(total, dtype=np.int32)
    result.pod_set = -1
    result.level = -1
    out = result.nodes
    if pod_sets.n_sets == 0:
        return result
    miss.need = 0
    miss.offered = 0
    init_scratch(&sc, fleet, total)
    try:
        with nogil:
            status = run_plan(fleet, &sc, pod_sets.sets, pod_sets.order, pod_sets.n_sets, platform,
                              total == 1, ok, &out[0], &miss, &failed)
    finally:
        free_scratch(&sc)
    if status == PLAN_NO_MEMORY:
        raise MemoryError()
    if status != PLAN_OK:
        ps = &pod_sets.sets[failed]
        result.status = status
        result.need = miss.need
        result.offered = miss.offered
        result.pod_set = failed
        result.level = ps.required if ps.required >= 0 else ps.slice_level
        for i in range(total):
            out[i] = -1
    return result


# ---------------------------------------------------------------- scoring

cdef bint is_planned(const int32_t[::1] planned, int32_t node) noexcept nogil:
    cdef int32_t lo = 0, hi = planned.shape[0] - 1, mid
    while lo <= hi:
        mid = (lo + hi) >> 1
        if planned[mid] == node:
            return True
        if planned[mid] < node:
            lo = mid + 1
        else:
            hi = mid - 1
    return False


def score_nodes(
    FleetBitmap fleet,
    const int32_t[::1] nodes,
    int32_t gpus,
    const int32_t[::1] planned,
    int8_t[::1] out,
):
    """Score each node for one pod of ``gpus`` GPUs (OUT ``out``, aligned with ``nodes``).

    -1: unknown node (index -1); 0: the pod does not fit; 10: the node is in
    the gang's plan (``planned``, sorted ascending); otherwise 1..8, higher
    where the node's domain (or, for one-node domains, its block) is busier,
    +1 if the node is partly used, +1 if its domain is not wholly idle; a
    detached node scores 1. Packing like this leaves whole domains for gangs.
    """
    cdef int32_t i, n, d, f
    cdef int64_t used, tot
    cdef int8_t s
    if out.shape[0] != nodes.shape[0]:
        raise ValueError("out must align with nodes")
    if gpus < 0:
        raise ValueError("gpus must be >= 0")
    for i in range(1, planned.shape[0]):
        if planned[i - 1] > planned[i]:
            raise ValueError("planned must be sorted ascending")
    with nogil:
        for i in range(nodes.shape[0]):
            n = nodes[i]
            if n < 0 or n >= fleet.n_nodes:
                out[i] = -1
                continue
            f = fleet.node_free(n)
            if not fleet.node_usable[n] or f < gpus:
                out[i] = 0
                continue
            if is_planned(planned, n):
                out[i] = PLAN_MAX_SCORE
                continue
            d = fleet.node_domain[n]
            if fleet.flags[d] & DOMAIN_DETACHED:
                out[i] = 1
                continue
            if fleet.node_start[d + 1] - fleet.node_start[d] == 1 and fleet.n_levels > 0 and fleet.group[0, d] >= 0:
                tot = fleet.group_usable[0, fleet.group[0, d]]
                used = tot - fleet.group_free[0, fleet.group[0, d]]
            else:
                tot = fleet.domain_usable[d]
                used = tot - fleet.domain_free[d]
            s = <int8_t>(1 + (6 * used) // tot)
            if fleet.node_used[n] > 0:
                s += 1
            if not fleet.is_wholly_free(d):
                s += 1
            out[i] = s
    return None

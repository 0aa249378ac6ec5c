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

``score_nodes`` ranks candidate nodes for one pod on kube-scheduler's 0..10
scale. Equals ``twin.gang.score_nodes``.

The module runs past 500 lines because the planner's steps (required
and preferred levels, slices at each level, pod sets, filling, undo) all read
and write one ``Scratch`` (its buffers and undo log) ``nogil``; cut apart,
each piece would need ``Scratch`` and its helpers declared in a .pxd. The
domain-set search needs only the fleet and the capacities, so it lives apart
in domainset.pyx.
"""

import numpy as np

from libc.stdlib cimport calloc, free
from libc.string cimport memcpy, memset

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
from kilter._native.domainset cimport choose_set, free_set_scratch, init_set_scratch

OK = PLAN_OK
NO_CAPACITY = PLAN_NO_CAPACITY
REQUIRED_TOO_SMALL = PLAN_REQUIRED_TOO_SMALL
SLICES_DO_NOT_FIT = PLAN_SLICES_DO_NOT_FIT
NONE = LEVEL_NONE
NODE = LEVEL_NODE
DOMAIN = LEVEL_DOMAIN
UP = LEVEL_UP
MAX_SCORE = PLAN_MAX_SCORE


# ---------------------------------------------------------------- capacities

cdef int32_t node_fits(FleetBitmap fl, int32_t node, const uint8_t* node_ok) noexcept nogil:
    if not fl.node_usable[node]:
        return 0
    if node_ok != NULL and not node_ok[node]:
        return 0
    return 1


cdef void compute_caps(FleetBitmap fl, Scratch* sc, int32_t gpus, int32_t unit,
                       const uint8_t* node_ok) noexcept nogil:
    """caps[d] = whole units of ``unit`` pods of ``gpus`` GPUs that domain d can take; live = caps > 0."""
    cdef int32_t d, k, node
    cdef int64_t c
    sc.n_live = 0
    for d in range(fl.n_domains):
        c = 0
        if sc.base[d]:
            if node_ok == NULL:
                for k in range(gpus, fl.max_gpus + 1):
                    c += fl.hist[d, k] * (k // gpus)
            else:
                for node in range(fl.node_start[d], fl.node_start[d + 1]):
                    if node_fits(fl, node, node_ok):
                        c += fl.node_free(node) // gpus
            c //= unit
        sc.caps[d] = <int32_t>c
        sc.live[d] = c > 0
        sc.n_live += c > 0


cdef void sort_live(FleetBitmap fl, Scratch* sc) noexcept nogil:
    """order = live domains by caps descending, index ascending (a stable counting sort)."""
    cdef int32_t d, c, pos, width = sc.cap_width
    memset(sc.bucket, 0, (width + 1) * sizeof(int32_t))
    for d in range(fl.n_domains):
        if sc.live[d]:
            sc.bucket[width - sc.caps[d]] += 1
    pos = 0
    for c in range(width + 1):
        d = sc.bucket[c]
        sc.bucket[c] = pos
        pos += d
    for d in range(fl.n_domains):
        if sc.live[d]:
            c = width - sc.caps[d]
            sc.order[sc.bucket[c]] = d
            sc.bucket[c] += 1
    sc.n_order = pos


cdef int64_t live_total(FleetBitmap fl, Scratch* sc) noexcept nogil:
    cdef int64_t t = 0
    cdef int32_t d
    for d in range(fl.n_domains):
        if sc.live[d]:
            t += sc.caps[d]
    return t


cdef int32_t choose_group(FleetBitmap fl, Scratch* sc, int32_t level, int64_t need,
                          int64_t* best_sum) noexcept nogil:
    """The group at ``level`` (a required or preferred level) to confine the pod set to, or -1.

    Candidates are groups whose live domains cover ``need``. Preference: fewest
    domains, then the smallest total capacity (tightest group), then index.
    ``best_sum`` receives the largest capacity any group offers.
    """
    cdef int32_t n = fl.n_groups[level]
    cdef int32_t i, d, g, best = -1
    memset(sc.gsum, 0, n * sizeof(int64_t))
    memset(sc.gtotal, 0, n * sizeof(int64_t))
    memset(sc.gcnt, 0, n * sizeof(int32_t))
    memset(sc.gk, 0, n * sizeof(int32_t))
    for i in range(sc.n_order):
        d = sc.order[i]
        g = fl.group[level, d]
        if g < 0:
            continue
        sc.gtotal[g] += sc.caps[d]
        if sc.gsum[g] < need:
            sc.gsum[g] += sc.caps[d]
            sc.gcnt[g] += 1
            if sc.gsum[g] >= need:
                sc.gk[g] = sc.gcnt[g]
    best_sum[0] = 0
    for g in range(n):
        if sc.gtotal[g] > best_sum[0]:
            best_sum[0] = sc.gtotal[g]
        if sc.gk[g] == 0:
            continue
        if best < 0 or sc.gk[g] < sc.gk[best] or (
            sc.gk[g] == sc.gk[best] and sc.gtotal[g] < sc.gtotal[best]
        ):
            best = g
    return best


cdef void confine(FleetBitmap fl, Scratch* sc, int32_t level, int32_t g) noexcept nogil:
    cdef int32_t d
    for d in range(fl.n_domains):
        if sc.live[d] and fl.group[level, d] != g:
            sc.live[d] = 0
    sort_live(fl, sc)


# ---------------------------------------------------------------- booking

cdef int book(FleetBitmap fl, Scratch* sc, int32_t node, int32_t gpus) noexcept nogil:
    if fl.take(node, gpus) != 0:
        return -1
    sc.undo_node[sc.n_undo] = node
    sc.undo_gpus[sc.n_undo] = gpus
    sc.n_undo += 1
    return 0


cdef void rollback(FleetBitmap fl, Scratch* sc, int32_t mark) noexcept nogil:
    while sc.n_undo > mark:
        sc.n_undo -= 1
        fl.give(sc.undo_node[sc.n_undo], sc.undo_gpus[sc.n_undo])


cdef int fill_domain(FleetBitmap fl, Scratch* sc, int32_t d, int32_t pods, int32_t gpus,
                     const uint8_t* node_ok, int32_t* out) noexcept nogil:
    """Best-fit ``pods`` pods into domain d, each onto the fitting node with the fewest idle GPUs.

    Written in rank order: a node's pods together, nodes ascending.
    """
    cdef int32_t p, j, node, best, f, best_f, first = fl.node_start[d], n = fl.node_start[d + 1] - first
    memset(sc.node_count, 0, n * sizeof(int32_t))
    for p in range(pods):
        best = -1
        best_f = 0
        for node in range(first, first + n):
            if not node_fits(fl, node, node_ok):
                continue
            f = fl.node_free(node)
            if f >= gpus and (best < 0 or f < best_f):
                best = node
                best_f = f
        if best < 0 or book(fl, sc, best, gpus) != 0:
            return -1
        sc.node_count[best - first] += 1
    p = 0
    for node in range(n):
        for j in range(sc.node_count[node]):
            out[p] = first + node
            p += 1
    return 0


# ---------------------------------------------------------------- pod sets

cdef bint better_domain(FleetBitmap fl, Scratch* sc, int32_t a, int32_t b) noexcept nogil:
    """Is domain a a tighter pick than b at equal fit? Partly used first, then fewer idle GPUs, then index."""
    cdef bint wa, wb
    if b < 0:
        return True
    if sc.caps[a] != sc.caps[b]:
        return sc.caps[a] < sc.caps[b]
    wa = fl.is_wholly_free(a)
    wb = fl.is_wholly_free(b)
    if wa != wb:
        return wb
    if fl.domain_free[a] != fl.domain_free[b]:
        return fl.domain_free[a] < fl.domain_free[b]
    return a < b


cdef int plan_units(FleetBitmap fl, Scratch* sc, int32_t gpus, int32_t n_units, int32_t unit,
                    int32_t required, int32_t preferred, const uint8_t* node_ok,
                    int32_t* out, int32_t* info) noexcept nogil:
    """Place n_units units of ``unit`` pods (a unit never splits across domains).

    Expects caps/live computed for (gpus, unit). On success every pod is booked
    and written to out; on failure nothing of this call stays booked.
    """
    cdef int32_t d, node, best, f, best_f, g, k, level, limit, n, written
    cdef int64_t need = n_units, total, best_sum = 0, need_gpus
    cdef int32_t mark = sc.n_undo

    if required == LEVEL_NODE:
        need_gpus = <int64_t>n_units * unit * gpus
        best = -1
        best_f = 0
        for d in range(fl.n_domains):
            if not sc.base[d]:
                continue
            for node in range(fl.node_start[d], fl.node_start[d + 1]):
                if not node_fits(fl, node, node_ok):
                    continue
                f = fl.node_free(node)
                if f > best_sum:
                    best_sum = f
                if f >= need_gpus and (best < 0 or f < best_f):
                    best = node
                    best_f = f
        if best < 0:
            info[0] = n_units * unit
            info[1] = <int32_t>(best_sum // gpus)
            return PLAN_REQUIRED_TOO_SMALL
        for k in range(n_units * unit):
            if book(fl, sc, best, gpus) != 0:
                rollback(fl, sc, mark)
                return PLAN_NO_CAPACITY
            out[k] = best
        return PLAN_OK

    if required == LEVEL_DOMAIN:
        best = -1
        for d in range(fl.n_domains):
            if sc.live[d]:
                if sc.caps[d] > best_sum:
                    best_sum = sc.caps[d]
                if sc.caps[d] >= need and better_domain(fl, sc, d, best):
                    best = d
        if best < 0:
            info[0] = n_units * unit
            info[1] = <int32_t>(best_sum * unit)
            return PLAN_REQUIRED_TOO_SMALL
        if fill_domain(fl, sc, best, n_units * unit, gpus, node_ok, out) != 0:
            rollback(fl, sc, mark)
            return PLAN_NO_CAPACITY
        return PLAN_OK

    sort_live(fl, sc)  # the order choose_group reads; the node/domain paths above do not
    limit = fl.n_levels
    if required >= LEVEL_UP:
        level = required - LEVEL_UP
        g = choose_group(fl, sc, level, need, &best_sum)
        if g < 0:
            info[0] = n_units * unit
            info[1] = <int32_t>(best_sum * unit)
            return PLAN_REQUIRED_TOO_SMALL
        confine(fl, sc, level, g)
        limit = level

    total = live_total(fl, sc)
    if total < need:
        info[0] = n_units * unit
        info[1] = <int32_t>(total * unit)
        return PLAN_NO_CAPACITY

    if preferred >= LEVEL_UP and preferred - LEVEL_UP < limit:
        level = preferred - LEVEL_UP
        g = choose_group(fl, sc, level, need, &best_sum)
        if g >= 0:
            confine(fl, sc, level, g)

    n = choose_set(fl, &sc.dset, sc.caps, sc.live, need, <int64_t>unit * gpus, sc.set_domain, sc.set_units)
    if n < 0:
        return PLAN_NO_MEMORY
    written = 0
    for k in range(n):
        if fill_domain(fl, sc, sc.set_domain[k], sc.set_units[k] * unit, gpus, node_ok, out + written) != 0:
            n = 0
            break
        written += sc.set_units[k] * unit
    if n == 0:
        rollback(fl, sc, mark)
        info[0] = n_units * unit
        info[1] = <int32_t>(total * unit)
        return PLAN_NO_CAPACITY
    return PLAN_OK


cdef void set_base(FleetBitmap fl, Scratch* sc, int32_t platform, bint allow_detached,
                   bint only_gang) noexcept nogil:
    cdef int32_t d
    for d in range(fl.n_domains):
        sc.base[d] = (
            (platform < 0 or fl.platform[d] == platform)
            and (allow_detached or not (fl.flags[d] & DOMAIN_DETACHED))
            and (not only_gang or sc.in_gang[d])
        )


cdef int plan_pod_set(FleetBitmap fl, Scratch* sc, int32_t count, int32_t gpus, int32_t required,
                      int32_t preferred, int32_t slice_size, int32_t slice_level, int32_t platform,
                      bint allow_detached, bint only_gang, const uint8_t* node_ok,
                      int32_t* out, int32_t* info) noexcept nogil:
    """One pod set under its constraints, translated to units for plan_units."""
    cdef int32_t s, i, j, n_slices, status, g, mark = sc.n_undo
    cdef int64_t best_sum = 0
    set_base(fl, sc, platform, allow_detached, only_gang)

    if slice_size <= 1 or slice_level == LEVEL_NONE or (required >= 0 and slice_level >= required):
        compute_caps(fl, sc, gpus, 1, node_ok)
        return plan_units(fl, sc, gpus, count, 1, required, preferred, node_ok, out, info)

    n_slices = count // slice_size
    if slice_level == LEVEL_NODE:
        # A slice on one node is one pod of slice_size * gpus GPUs.
        compute_caps(fl, sc, gpus * slice_size, 1, node_ok)
        status = plan_units(fl, sc, gpus * slice_size, n_slices, 1, required, preferred, node_ok, out, info)
        if status != PLAN_OK:
            info[0] = count
            info[1] = info[1] * slice_size
            return status
        # Re-book per pod so every pod holds exactly its own GPUs.
        rollback(fl, sc, mark)
        for i in range(n_slices - 1, -1, -1):
            for j in range(slice_size - 1, -1, -1):
                out[i * slice_size + j] = out[i]
        for i in range(count):
            if book(fl, sc, out[i], gpus) != 0:
                rollback(fl, sc, mark)
                return PLAN_NO_CAPACITY
        return PLAN_OK

    if slice_level == LEVEL_DOMAIN:
        compute_caps(fl, sc, gpus, slice_size, node_ok)
        status = plan_units(fl, sc, gpus, n_slices, slice_size, required, preferred, node_ok, out, info)
        if status == PLAN_NO_CAPACITY:
            compute_caps(fl, sc, gpus, 1, node_ok)
            if live_total(fl, sc) >= count:
                return PLAN_SLICES_DO_NOT_FIT
        return status

    # Slices above the domain: place them one by one, each confined to one group.
    if required >= LEVEL_UP:
        compute_caps(fl, sc, gpus, 1, node_ok)
        sort_live(fl, sc)
        g = choose_group(fl, sc, required - LEVEL_UP, count, &best_sum)
        if g < 0:
            info[0] = count
            info[1] = <int32_t>best_sum
            return PLAN_REQUIRED_TOO_SMALL
        for i in range(fl.n_domains):
            if sc.base[i] and fl.group[required - LEVEL_UP, i] != g:
                sc.base[i] = 0
    for s in range(n_slices):
        compute_caps(fl, sc, gpus, 1, node_ok)
        status = plan_units(fl, sc, gpus, slice_size, 1, slice_level, LEVEL_NONE, node_ok,
                            out + s * slice_size, info)
        if status != PLAN_OK:
            rollback(fl, sc, mark)
            if status == PLAN_NO_MEMORY:
                return status
            info[0] = count
            info[1] = s * slice_size
            return PLAN_SLICES_DO_NOT_FIT
    order_slices(fl, sc, n_slices, slice_size, out)
    return PLAN_OK


cdef void order_slices(FleetBitmap fl, Scratch* sc, int32_t n_slices, int32_t size, int32_t* out) noexcept nogil:
    """Slices placed one by one, put in rank order of their first domain (stable): a block's slices sit together."""
    cdef int32_t s, i, c, pos = 0
    cdef int32_t* count = sc.dset.count
    memset(count, 0, (fl.n_domains + 1) * sizeof(int32_t))
    for s in range(n_slices):
        sc.slice_key[s] = sc.rank_pos[fl.node_domain[out[s * size]]]
        count[sc.slice_key[s]] += 1
    for c in range(fl.n_domains + 1):
        i = count[c]
        count[c] = pos
        pos += i
    for s in range(n_slices):
        sc.slice_order[count[sc.slice_key[s]]] = s
        count[sc.slice_key[s]] += 1
    for i in range(n_slices):
        memcpy(sc.moved + i * size, out + sc.slice_order[i] * size, size * sizeof(int32_t))
    memcpy(out, sc.moved, n_slices * size * sizeof(int32_t))


cdef int run_plan(FleetBitmap fl, Scratch* sc, int32_t n_sets, const int32_t* count, const int32_t* gpus,
                  const int32_t* required, const int32_t* preferred, const int32_t* slice_size,
                  const int32_t* slice_level, const int32_t* offset, const int32_t* set_order,
                  int32_t platform, bint allow_detached, const uint8_t* node_ok,
                  int32_t* out, int32_t* info) noexcept nogil:
    cdef int32_t i, j, ps, status, mark
    cdef bint any_gang = False
    for i in range(n_sets):
        ps = set_order[i]
        status = -1
        if any_gang:
            mark = sc.n_undo
            status = plan_pod_set(fl, sc, count[ps], gpus[ps], required[ps], preferred[ps],
                                  slice_size[ps], slice_level[ps], platform, allow_detached, True,
                                  node_ok, out + offset[ps], info)
            if status == PLAN_NO_MEMORY:
                return status
            if status != PLAN_OK:
                rollback(fl, sc, mark)
        if status != PLAN_OK:
            status = plan_pod_set(fl, sc, count[ps], gpus[ps], required[ps], preferred[ps],
                                  slice_size[ps], slice_level[ps], platform, allow_detached, False,
                                  node_ok, out + offset[ps], info)
        if status != PLAN_OK:
            info[2] = ps
            return status
        for j in range(count[ps]):
            sc.in_gang[fl.node_domain[out[offset[ps] + j]]] = 1
            any_gang = True
    return PLAN_OK


def plan_gang(
    FleetBitmap fleet,
    const int32_t[::1] count,
    const int32_t[::1] gpus,
    const int32_t[::1] required,
    const int32_t[::1] preferred,
    const int32_t[::1] slice_size,
    const int32_t[::1] slice_level,
    int32_t platform,
    const uint8_t[::1] node_ok,
    int32_t[::1] out_node,
    int32_t[::1] out_info,
):
    """Plan a gang of pod sets; returns a status code (``OK`` = 0).

    Per pod set: ``count`` pods of ``gpus`` GPUs; ``required``/``preferred`` a
    level (-1 none, 0 node, 1 domain, 2+i the i-th level above); slices of
    ``slice_size`` pods confined to ``slice_level``. ``platform`` -1 means any.
    ``node_ok`` (or None) marks eligible nodes. OUT ``out_node``: a node per pod,
    pod sets in input order. OUT ``out_info`` (4 ints): pods needed, pods the
    best candidate offers, failing pod set, its level. Pod sets are planned
    largest first; later ones try the gang's domains before any other.

    Pod i of a pod set is rank i: the pod set's domains come in rank order
    (group path from the top level down, then domain index, i.e. name), a
    domain's pods together, and within it a node's pods together, nodes
    ascending. Slices above the domain are placed one by one and come whole,
    in rank order of their first domain.
    """
    cdef int32_t n_sets = count.shape[0]
    cdef int32_t i, j, total = 0, status, lv, top = LEVEL_UP + fleet.n_levels
    cdef const uint8_t* ok = NULL
    cdef int64_t size_i, size_j
    if (gpus.shape[0] != n_sets or required.shape[0] != n_sets or preferred.shape[0] != n_sets
            or slice_size.shape[0] != n_sets or slice_level.shape[0] != n_sets):
        raise ValueError("pod set arrays must have equal lengths")
    if out_info.shape[0] < 4:
        raise ValueError("out_info needs 4 entries")
    for i in range(n_sets):
        if count[i] <= 0 or gpus[i] <= 0:
            raise ValueError(f"pod set {i}: count and gpus must be >= 1")
        for lv in (required[i], preferred[i], slice_level[i]):
            if lv < -1 or lv >= top:
                raise ValueError(f"pod set {i}: level {lv} outside -1..{top - 1}")
        if slice_size[i] <= 0 or count[i] % slice_size[i] != 0:
            raise ValueError(f"pod set {i}: slice size {slice_size[i]} must divide count {count[i]}")
        if total > 2**30 - count[i]:
            raise ValueError("too many pods in one gang")
        total += count[i]
    if out_node.shape[0] != total:
        raise ValueError(f"out_node needs {total} entries")
    if node_ok is not None:
        if node_ok.shape[0] != fleet.n_nodes:
            raise ValueError("node_ok needs one entry per node")
        ok = &node_ok[0] if fleet.n_nodes else NULL
    out_info[0] = 0
    out_info[1] = 0
    out_info[2] = -1
    out_info[3] = -1
    for i in range(total):
        out_node[i] = -1
    if n_sets == 0:
        return PLAN_OK

    # Offsets of each pod set's pods in out_node, and the planning order:
    # most GPUs first, ties by input order (an insertion sort; gangs have few pod sets).
    cdef int32_t* off = <int32_t*>calloc(n_sets, sizeof(int32_t))
    cdef int32_t* so = <int32_t*>calloc(n_sets, sizeof(int32_t))
    if off == NULL or so == NULL:
        free(off)
        free(so)
        raise MemoryError()
    for i in range(1, n_sets):
        off[i] = off[i - 1] + count[i - 1]
    for i in range(n_sets):
        so[i] = i
        j = i
        size_i = <int64_t>count[i] * gpus[i]
        while j > 0:
            size_j = <int64_t>count[so[j - 1]] * gpus[so[j - 1]]
            if size_j >= size_i:
                break
            so[j] = so[j - 1]
            j -= 1
        so[j] = i

    cdef Scratch sc
    memset(&sc, 0, sizeof(Scratch))
    cdef int32_t nd = max(fleet.n_domains, 1), most_nodes = 1
    for i in range(fleet.n_domains):
        most_nodes = max(most_nodes, fleet.node_start[i + 1] - fleet.node_start[i])
    sc.cap_width = fleet.n_words * 64
    sc.caps = <int32_t*>calloc(nd, sizeof(int32_t))
    sc.base = <uint8_t*>calloc(nd, 1)
    sc.live = <uint8_t*>calloc(nd, 1)
    sc.in_gang = <uint8_t*>calloc(nd, 1)
    sc.order = <int32_t*>calloc(nd, sizeof(int32_t))
    sc.bucket = <int32_t*>calloc(sc.cap_width + 1, sizeof(int32_t))
    sc.set_domain = <int32_t*>calloc(nd, sizeof(int32_t))
    sc.set_units = <int32_t*>calloc(nd, sizeof(int32_t))
    sc.rank_pos = <int32_t*>calloc(nd, sizeof(int32_t))
    sc.node_count = <int32_t*>calloc(most_nodes, sizeof(int32_t))
    sc.slice_key = <int32_t*>calloc(max(total, 1), sizeof(int32_t))
    sc.slice_order = <int32_t*>calloc(max(total, 1), sizeof(int32_t))
    sc.moved = <int32_t*>calloc(max(total, 1), sizeof(int32_t))
    sc.gsum = <int64_t*>calloc(fleet.max_groups, sizeof(int64_t))
    sc.gtotal = <int64_t*>calloc(fleet.max_groups, sizeof(int64_t))
    sc.gcnt = <int32_t*>calloc(fleet.max_groups, sizeof(int32_t))
    sc.gk = <int32_t*>calloc(fleet.max_groups, sizeof(int32_t))
    sc.undo_node = <int32_t*>calloc(max(total, 1), sizeof(int32_t))
    sc.undo_gpus = <int32_t*>calloc(max(total, 1), sizeof(int32_t))
    try:
        if (sc.caps == NULL or sc.base == NULL or sc.live == NULL or sc.in_gang == NULL or sc.order == NULL
                or sc.bucket == NULL or sc.set_domain == NULL or sc.set_units == NULL or sc.rank_pos == NULL
                or sc.node_count == NULL or sc.slice_key == NULL or sc.slice_order == NULL or sc.moved == NULL
                or sc.gsum == NULL or sc.gtotal == NULL or sc.gcnt == NULL or sc.gk == NULL
                or sc.undo_node == NULL or sc.undo_gpus == NULL or init_set_scratch(&sc.dset, fleet) != 0):
            raise MemoryError()
        for i in range(fleet.n_domains):
            sc.rank_pos[sc.dset.rank_order[i]] = i
        with nogil:
            status = run_plan(fleet, &sc, n_sets, &count[0], &gpus[0], &required[0], &preferred[0],
                              &slice_size[0], &slice_level[0], off, so, platform,
                              total == 1, ok, &out_node[0], &out_info[0])
            rollback(fleet, &sc, 0)
        if status == PLAN_NO_MEMORY:
            raise MemoryError()
        if status == PLAN_OK:
            out_info[0] = 0
            out_info[1] = 0
        else:
            i = out_info[2]
            out_info[3] = required[i] if required[i] >= 0 else slice_level[i]
            for i in range(total):
                out_node[i] = -1
        return status
    finally:
        free(sc.caps); free(sc.base); free(sc.live); free(sc.in_gang); free(sc.order); free(sc.bucket)
        free(sc.set_domain); free(sc.set_units); free(sc.rank_pos); free(sc.node_count)
        free(sc.slice_key); free(sc.slice_order); free(sc.moved)
        free(sc.gsum); free(sc.gtotal); free(sc.gcnt); free(sc.gk); free(sc.undo_node); free(sc.undo_gpus)
        free_set_scratch(&sc.dset)
        free(off); free(so)


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

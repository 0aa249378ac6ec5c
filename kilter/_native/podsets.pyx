# cython: language_level=3
"""The planner's steps, pod set by pod set, over one ``Scratch``.

``run_plan`` plans a gang's pod sets in the order given; each pod set
(``plan_pod_set``) meets its required level and its slices, is confined to
the group of a preferred level above the domain when one can hold it, and
takes the domains ``domainset.choose_set`` chooses; each chosen domain is
filled node by node, best fit (``fill_domain``). Every booking goes to the
undo log and is undone before ``run_plan`` returns. The steps share the
scratch's buffers and run ``nogil``; ``gang.plan_gang`` checks the input,
allocates the scratch (``init_scratch``) and reads the answer.

Equals the steps of ``twin.podsets``.
"""

from libc.string cimport memcpy, memset

from kilter._native._alloc cimport Pieces, alloc_pieces, free_pieces, want
from kilter._native._types cimport DOMAIN_DETACHED, LEVEL_DOMAIN, LEVEL_NODE, LEVEL_NONE, LEVEL_UP, int32_t, int64_t, uint8_t
from kilter._native.candidates cimport free_set_scratch, init_set_scratch
from kilter._native.domains cimport FleetBitmap
from kilter._native.domainset cimport choose_set


# ---------------------------------------------------------------- scratch

cdef int init_scratch(Scratch* sc, FleetBitmap fl, int32_t total) except -1:
    """Allocate the buffers of a plan of ``total`` pods (MemoryError if they cannot be had)."""
    cdef Pieces p
    cdef int32_t d, nd = fl.n_domains, most_nodes = 1
    for d in range(nd):
        most_nodes = max(most_nodes, fl.node_start[d + 1] - fl.node_start[d])
    memset(sc, 0, sizeof(Scratch))
    memset(&p, 0, sizeof(Pieces))
    sc.cap_width = fl.n_words * 64
    want(&p, &sc.caps, nd, sizeof(int32_t))
    want(&p, &sc.base, nd, sizeof(uint8_t))
    want(&p, &sc.live, nd, sizeof(uint8_t))
    want(&p, &sc.in_gang, nd, sizeof(uint8_t))
    want(&p, &sc.order, nd, sizeof(int32_t))
    want(&p, &sc.bucket, sc.cap_width + 1, sizeof(int32_t))
    want(&p, &sc.set_domain, nd, sizeof(int32_t))
    want(&p, &sc.set_units, nd, sizeof(int32_t))
    want(&p, &sc.rank_pos, nd, sizeof(int32_t))
    want(&p, &sc.node_count, most_nodes, sizeof(int32_t))
    want(&p, &sc.slice_key, total, sizeof(int32_t))
    want(&p, &sc.slice_order, total, sizeof(int32_t))
    want(&p, &sc.moved, total, sizeof(int32_t))
    want(&p, &sc.gsum, fl.max_groups, sizeof(int64_t))
    want(&p, &sc.gtotal, fl.max_groups, sizeof(int64_t))
    want(&p, &sc.gcnt, fl.max_groups, sizeof(int32_t))
    want(&p, &sc.gk, fl.max_groups, sizeof(int32_t))
    want(&p, &sc.undo_node, total, sizeof(int32_t))
    want(&p, &sc.undo_gpus, total, sizeof(int32_t))
    sc.memory = alloc_pieces(&p)
    try:
        init_set_scratch(&sc.dset, fl)
    except MemoryError:
        free_scratch(sc)
        raise
    for d in range(nd):
        sc.rank_pos[sc.dset.rank_order[d]] = d
    return 0


cdef void free_scratch(Scratch* sc) noexcept nogil:
    free_set_scratch(&sc.dset)
    free_pieces(sc.memory)
    memset(sc, 0, sizeof(Scratch))


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
                    int32_t* out, Shortfall* miss) noexcept nogil:
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
            miss.need = n_units * unit
            miss.offered = <int32_t>(best_sum // gpus)
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
            miss.need = n_units * unit
            miss.offered = <int32_t>(best_sum * unit)
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
            miss.need = n_units * unit
            miss.offered = <int32_t>(best_sum * unit)
            return PLAN_REQUIRED_TOO_SMALL
        confine(fl, sc, level, g)
        limit = level

    total = live_total(fl, sc)
    if total < need:
        miss.need = n_units * unit
        miss.offered = <int32_t>(total * unit)
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
        miss.need = n_units * unit
        miss.offered = <int32_t>(total * unit)
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


cdef int plan_pod_set(FleetBitmap fl, Scratch* sc, const PodSetAsk* ps, int32_t platform,
                      bint allow_detached, bint only_gang, const uint8_t* node_ok,
                      int32_t* out, Shortfall* miss) noexcept nogil:
    """One pod set under its constraints, translated to units for plan_units."""
    cdef int32_t count = ps.count, gpus = ps.gpus, required = ps.required, preferred = ps.preferred
    cdef int32_t slice_size = ps.slice_size, slice_level = ps.slice_level
    cdef int32_t s, i, j, n_slices, status, g, mark = sc.n_undo
    cdef int64_t best_sum = 0
    set_base(fl, sc, platform, allow_detached, only_gang)

    if slice_size <= 1 or slice_level == LEVEL_NONE or (required >= 0 and slice_level >= required):
        compute_caps(fl, sc, gpus, 1, node_ok)
        return plan_units(fl, sc, gpus, count, 1, required, preferred, node_ok, out, miss)

    n_slices = count // slice_size
    if slice_level == LEVEL_NODE:
        # A slice on one node is one pod of slice_size * gpus GPUs.
        compute_caps(fl, sc, gpus * slice_size, 1, node_ok)
        status = plan_units(fl, sc, gpus * slice_size, n_slices, 1, required, preferred, node_ok, out, miss)
        if status != PLAN_OK:
            miss.need = count
            miss.offered = miss.offered * slice_size
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
        status = plan_units(fl, sc, gpus, n_slices, slice_size, required, preferred, node_ok, out, miss)
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
            miss.need = count
            miss.offered = <int32_t>best_sum
            return PLAN_REQUIRED_TOO_SMALL
        for i in range(fl.n_domains):
            if sc.base[i] and fl.group[required - LEVEL_UP, i] != g:
                sc.base[i] = 0
    for s in range(n_slices):
        compute_caps(fl, sc, gpus, 1, node_ok)
        status = plan_units(fl, sc, gpus, slice_size, 1, slice_level, LEVEL_NONE, node_ok,
                            out + s * slice_size, miss)
        if status != PLAN_OK:
            rollback(fl, sc, mark)
            if status == PLAN_NO_MEMORY:
                return status
            miss.need = count
            miss.offered = s * slice_size
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


cdef int run_plan(FleetBitmap fl, Scratch* sc, const PodSetAsk* sets, const int32_t* set_order, int32_t n_sets,
                  int32_t platform, bint allow_detached, const uint8_t* node_ok,
                  int32_t* out, Shortfall* miss, int32_t* failed) noexcept nogil:
    """Plan the pod sets in ``set_order``; each after the first tries the gang's domains before any other.

    OUT ``out``: a node per pod, at each pod set's offset; on failure ``miss``
    and ``failed`` (the pod set). Every booking is undone before returning.
    """
    cdef int32_t i, j, mark, status = PLAN_OK
    cdef const PodSetAsk* ps
    cdef bint any_gang = False
    for i in range(n_sets):
        ps = &sets[set_order[i]]
        status = -1
        if any_gang:
            mark = sc.n_undo
            status = plan_pod_set(fl, sc, ps, platform, allow_detached, True, node_ok, out + ps.offset, miss)
            if status == PLAN_NO_MEMORY:
                break
            if status != PLAN_OK:
                rollback(fl, sc, mark)
        if status != PLAN_OK:
            status = plan_pod_set(fl, sc, ps, platform, allow_detached, False, node_ok, out + ps.offset, miss)
        if status != PLAN_OK:
            failed[0] = set_order[i]
            break
        for j in range(ps.count):
            sc.in_gang[fl.node_domain[out[ps.offset + j]]] = 1
        any_gang = True
    rollback(fl, sc, 0)
    return status

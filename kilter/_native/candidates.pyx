# cython: language_level=3
"""The domain-set search's working memory, its candidates and its objective.

``domainset.choose_set`` runs a dynamic programme over candidate domains;
this module prepares what it reads. Once per plan: the per-domain buffers
(one block) and the rank order with each domain's block numbered in it. Per
search: k, the fewest domains that cover the need, with c* and the slack
(``fewest``); the candidates in search order (``sort_candidates``); their
blocks and their classes of interchangeable domains (``cut_classes``); and
the packed value of each class with what opening a layer adds (``pack``).
The programme's own tables grow on demand (``reserve``).

Equals the corresponding steps of ``twin.domainset.choose``.
"""

from libc.stdlib cimport free, realloc
from libc.string cimport memset

from kilter._native._alloc cimport Pieces, alloc_pieces, free_pieces, want
from kilter._native._types cimport int32_t, int64_t, uint8_t, uint16_t
from kilter._native.domains cimport FleetBitmap


# ---------------------------------------------------------------- scratch

cdef void radix_pass(const int32_t* src, int32_t n, const int32_t* key, int32_t width,
                     int32_t* dst, int32_t* count) noexcept nogil:
    """Stable counting sort of src by key[src[i]] in 0 .. width - 1."""
    cdef int32_t i, c, pos = 0, k
    memset(count, 0, width * sizeof(int32_t))
    for i in range(n):
        count[key[src[i]]] += 1
    for c in range(width):
        k = count[c]
        count[c] = pos
        pos += k
    for i in range(n):
        c = key[src[i]]
        dst[count[c]] = src[i]
        count[c] += 1


cdef int32_t changed_levels(FleetBitmap fl, int32_t a, int32_t b) noexcept nogil:
    """Levels, from the block up, whose group changes between a and b (an unlabeled step always changes)."""
    cdef int32_t level, m = 0
    for level in range(fl.n_levels):
        if fl.group[level, a] != fl.group[level, b] or fl.group[level, b] < 0:
            m = level + 1
    return m


cdef int init_set_scratch(SetScratch* ss, FleetBitmap fl) except -1:
    """Allocate the per-domain buffers (MemoryError if they cannot be had) and number the blocks in rank order."""
    cdef int32_t n = fl.n_domains if fl.n_domains > 0 else 1
    cdef int32_t d, i, level, b = -1
    cdef int32_t* src
    cdef int32_t* dst
    cdef int32_t* t
    cdef Pieces p
    memset(ss, 0, sizeof(SetScratch))
    ss.n_domains = fl.n_domains
    ss.width = n + 1
    if fl.n_words * 64 + 1 > ss.width:
        ss.width = fl.n_words * 64 + 1
    if fl.max_groups + 1 > ss.width:
        ss.width = fl.max_groups + 1
    memset(&p, 0, sizeof(Pieces))
    want(&p, &ss.rank_order, n, sizeof(int32_t))
    want(&p, &ss.block, n, sizeof(int32_t))
    want(&p, &ss.cand, n, sizeof(int32_t))
    want(&p, &ss.tmp, n, sizeof(int32_t))
    want(&p, &ss.key, n, sizeof(int32_t))
    want(&p, &ss.count, ss.width, sizeof(int32_t))
    want(&p, &ss.chosen, n, sizeof(uint8_t))
    want(&p, &ss.runs, fl.n_levels + 1, sizeof(int32_t))
    want(&p, &ss.level_radix, fl.n_levels + 1, sizeof(int64_t))
    want(&p, &ss.inc, fl.n_levels + 1, sizeof(int64_t))
    want(&p, &ss.cls_start, n + 1, sizeof(int32_t))
    want(&p, &ss.cls_take, n, sizeof(int32_t))
    want(&p, &ss.cls_skip, n, sizeof(int32_t))
    want(&p, &ss.cls_shift, n, sizeof(int32_t))
    want(&p, &ss.cls_value, n, sizeof(int64_t))
    want(&p, &ss.blk_first, n + 1, sizeof(int32_t))
    want(&p, &ss.blk_levels, n, sizeof(int32_t))
    want(&p, &ss.blk_shift, n, sizeof(int32_t))
    ss.memory = alloc_pieces(&p)
    # Rank order: stable counting sorts by group, finest level first, from index order.
    src = ss.tmp
    dst = ss.rank_order
    for d in range(fl.n_domains):
        src[d] = d
    for level in range(fl.n_levels):
        for d in range(fl.n_domains):
            ss.key[d] = fl.group[level, d] + 1
        radix_pass(src, fl.n_domains, ss.key, fl.n_groups[level] + 1, dst, ss.count)
        t = src
        src = dst
        dst = t
    if src != ss.rank_order:
        for d in range(fl.n_domains):
            ss.rank_order[d] = src[d]
    for i in range(fl.n_domains):
        d = ss.rank_order[i]
        if i == 0 or changed_levels(fl, ss.rank_order[i - 1], d) > 0:
            b += 1
        ss.block[d] = b
    return 0


cdef void free_set_scratch(SetScratch* ss) noexcept nogil:
    free_pieces(ss.memory)
    free(ss.val); free(ss.closed); free(ss.row); free(ss.row_closed); free(ss.queue)
    free(ss.decided); free(ss.closed_from); free(ss.merge_from)
    memset(ss, 0, sizeof(SetScratch))


cdef int grow(void** buf, int64_t* have, int64_t want, size_t size) noexcept nogil:
    """Make *buf hold at least ``want`` entries of ``size`` bytes; -1 if out of memory."""
    cdef void* p
    if want <= have[0]:
        return 0
    if want > (<int64_t>1 << 40) // <int64_t>size:
        return -1
    p = realloc(buf[0], <size_t>want * size)
    if p == NULL:
        return -1
    buf[0] = p
    have[0] = want
    return 0


cdef int reserve(SetScratch* ss, int32_t layers, int64_t cells, int32_t k, int32_t n_cls, int32_t n_blk) noexcept nogil:
    """Grow the programme's buffers for this search; -1 if out of memory."""
    if (grow(<void**>&ss.val, &ss.cap_val, layers * cells, sizeof(int64_t)) != 0
            or grow(<void**>&ss.closed, &ss.cap_closed, cells, sizeof(int64_t)) != 0
            or grow(<void**>&ss.row, &ss.cap_row, k + 1, sizeof(int64_t)) != 0
            or grow(<void**>&ss.row_closed, &ss.cap_row_closed, k + 1, sizeof(uint8_t)) != 0
            or grow(<void**>&ss.queue, &ss.cap_queue, k + 1, sizeof(int32_t)) != 0
            or grow(<void**>&ss.decided, &ss.cap_decided, n_cls * cells, sizeof(uint16_t)) != 0
            or grow(<void**>&ss.closed_from, &ss.cap_closed_from, n_blk * cells, sizeof(uint8_t)) != 0):
        return -1
    return grow(<void**>&ss.merge_from, &ss.cap_merge_from, n_blk * cells, sizeof(uint8_t))


# ---------------------------------------------------------------- candidates

cdef int32_t fewest(SetScratch* ss, const int32_t* caps, const uint8_t* live, int64_t need,
                    int32_t cap_width, int32_t* c_star, int64_t* slack) noexcept nogil:
    """k = fewest live domains covering need (0 if none), from the histogram of capacities."""
    cdef int32_t d, c, k = 0
    cdef int64_t top = 0, j
    memset(ss.count, 0, (cap_width + 1) * sizeof(int32_t))
    for d in range(ss.n_domains):
        if live[d] and caps[d] > 0:
            ss.count[caps[d]] += 1
    for c in range(cap_width, 0, -1):
        if ss.count[c] == 0:
            continue
        if top + <int64_t>ss.count[c] * c >= need:
            j = (need - top + c - 1) // c
            c_star[0] = c
            slack[0] = top + j * c - need
            return k + <int32_t>j
        top += <int64_t>ss.count[c] * c
        k += ss.count[c]
    return 0


cdef int32_t sort_candidates(FleetBitmap fl, SetScratch* ss, const int32_t* caps, const uint8_t* live,
                             int32_t low, int32_t cap_width) noexcept nogil:
    """cand = live domains of capacity >= low, by (block, capacity, wholly idle, idle GPUs, index)."""
    cdef int32_t d, n = 0, width = fl.n_words * 64 + 1
    for d in range(fl.n_domains):
        if live[d] and caps[d] >= low:
            ss.cand[n] = d
            n += 1
    for d in range(n):
        ss.key[ss.cand[d]] = fl.domain_free[ss.cand[d]]
    radix_pass(ss.cand, n, ss.key, width, ss.tmp, ss.count)
    for d in range(n):
        ss.key[ss.cand[d]] = fl.is_wholly_free(ss.cand[d])
    radix_pass(ss.tmp, n, ss.key, 2, ss.cand, ss.count)
    radix_pass(ss.cand, n, caps, cap_width + 1, ss.tmp, ss.count)
    radix_pass(ss.tmp, n, ss.block, ss.width, ss.cand, ss.count)
    return n


cdef bint alike(FleetBitmap fl, const int32_t* caps, int32_t a, int32_t b) noexcept nogil:
    """Are consecutive candidates a and b interchangeable: one block, capacity, idleness, idle GPUs?"""
    return (changed_levels(fl, a, b) == 0 and caps[a] == caps[b] and fl.domain_free[a] == fl.domain_free[b]
            and fl.is_wholly_free(a) == fl.is_wholly_free(b))


cdef int32_t cut_classes(FleetBitmap fl, SetScratch* ss, const int32_t* caps, int32_t n_cand,
                         int32_t c_star, int32_t* n_blk) noexcept nogil:
    """Blocks and classes of the candidates; returns the number of active levels (layers - 1).

    A class is a run of interchangeable candidates taken m at a time; shorter
    runs (four or fewer free items, eight or fewer others) are cut into single
    items, which take_one handles faster (the search is exact either way, so
    the cut does not change the plan).
    """
    cdef int32_t i, j, d, prev = -1, m, level, active = 0, n_cls = 0, nb = 0, run_end = 0
    for i in range(fl.n_levels + 1):
        ss.runs[i] = 1
    for i in range(n_cand):
        d = ss.cand[i]
        m = changed_levels(fl, prev, d) if i else 0
        if m > active:
            active = m
        for level in range(m):
            ss.runs[level] += 1
        if i == 0 or m > 0:
            ss.blk_first[nb] = n_cls
            ss.blk_levels[nb] = m
            nb += 1
        if i >= run_end:
            j = i + 1
            while j < n_cand and j - i < MAX_TAKE and alike(fl, caps, ss.cand[j - 1], ss.cand[j]):
                j += 1
            run_end = j if j - i > (4 if caps[d] == c_star else 8) else i + 1
            ss.cls_start[n_cls] = i
            ss.cls_take[n_cls] = c_star - caps[d] if caps[d] < c_star else 0
            ss.cls_skip[n_cls] = caps[d] - c_star if caps[d] > c_star else 0
            n_cls += 1
        prev = d
    ss.cls_start[n_cls] = n_cand
    ss.blk_first[nb] = n_cls
    n_blk[0] = nb
    return active


cdef int64_t pack(FleetBitmap fl, SetScratch* ss, const int32_t* caps, int32_t n_cand, int32_t n_cls,
                  int32_t k, int32_t active) noexcept nogil:
    """Set cls_value and inc[layer]; returns the radix of the (idle, cap^2, idle GPUs) part.

    Each criterion, less its minimum over the candidates, sums over k items to
    below its radix, so integer order is the lexicographic order. Beyond any
    real fleet (a product over 2^61) the least significant criteria are dropped.
    """
    cdef int64_t lo[3]
    cdef int64_t hi[3]
    cdef int64_t radix[3]
    cdef int64_t comp[3]
    cdef int64_t* grp = ss.level_radix
    cdef int64_t* inc = ss.inc
    cdef int64_t prod, r, v, w, rest
    cdef int32_t i, j, d, level, upper, n_group = active, kept
    for j in range(3):
        lo[j] = INF
        hi[j] = -1
    for i in range(n_cand):
        d = ss.cand[i]
        comp[0] = fl.is_wholly_free(d)
        comp[1] = <int64_t>caps[d] * caps[d]
        comp[2] = fl.domain_free[d]
        for j in range(3):
            if comp[j] < lo[j]:
                lo[j] = comp[j]
            if comp[j] > hi[j]:
                hi[j] = comp[j]
    for j in range(3):
        radix[j] = k * (hi[j] - lo[j]) + 1
    for level in range(n_group):
        grp[level] = (ss.runs[level] if ss.runs[level] < k else k) + 1
    kept = n_group + 3
    while kept > 0:
        prod = 1
        for level in range(n_group):
            r = grp[level]
            prod = prod * r if prod <= (VALUE_LIMIT - 1) // r else VALUE_LIMIT
        for j in range(3):
            r = radix[j]
            prod = prod * r if prod <= (VALUE_LIMIT - 1) // r else VALUE_LIMIT
        if prod < VALUE_LIMIT:
            break
        kept -= 1
        if kept >= n_group:
            radix[kept - n_group] = 1
        else:
            grp[kept] = 1
    for i in range(n_cls):
        d = ss.cand[ss.cls_start[i]]
        comp[0] = fl.is_wholly_free(d)
        comp[1] = <int64_t>caps[d] * caps[d]
        comp[2] = fl.domain_free[d]
        v = 0
        for j in range(3):
            v = v * radix[j] + (comp[j] - lo[j] if radix[j] > 1 else 0)
        ss.cls_value[i] = v
    rest = radix[0] * radix[1] * radix[2]
    inc[0] = 0
    for level in range(n_group):
        w = 0 if grp[level] == 1 else rest
        for upper in range(level + 1, n_group):
            w *= grp[upper]
        inc[level + 1] = inc[level] + w
    return rest


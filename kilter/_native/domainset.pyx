# cython: language_level=3
"""The exact choice of a pod set's scale-up domains.

``choose_set`` returns the set of live domains that covers ``need`` units
and minimises, in order: the number of domains; the number of groups at
each level above the domain, finest first (blocks, then spines ...); the
total capacity (best fit of the set); wholly idle domains used; the sum of
squared capacities (the set breaks small holes, not large ones); idle GPUs;
and last, so the order is total, the set that avoids later domains in search
order (block in rank order, capacity, wholly idle, idle GPUs, index).
docs/placement.md says why each step is there.

Why it is exact and cheap. Let k be the fewest domains that can cover the
need, c* the k-th largest capacity and slack = (sum of the k largest) - need,
so slack < c*. Against the k largest, a k-set loses (c - c*) for each domain
above c* it leaves out and (c* - c) for each one below c* it takes in, and
covers the need exactly when these losses sum to at most slack; a domain
below c* - slack can never be taken. A dynamic programme over the
candidates in search order, with state (domains taken t <= k, loss <= slack,
closed levels) and the rest of the objective packed into one int64, is
therefore exact, and costs O(classes x (k + 1) x (slack + 1) x layers),
where (k + 1)(slack + 1) is at most about need + c*. The layer says which
levels have no taken domain in their current group yet (the candidates of a
group are contiguous in search order), so opening a block or spine is
counted when a domain is taken. Long runs of candidates alike in block,
capacity, idleness and idle GPUs form one class taken "m at once" (a class
of free items, capacity c*, through a monotone queue, so a block of a
thousand identical nodes costs one pass); short runs go item by item, which
is faster. Ties fall to fewer items taken, then to the more
closed layer, which is exactly the order of the last criterion.

The chosen domains come back in rank order (group path from the top level
down, then index), each with the units it takes: all it holds, except that
the slack stays in the one that keeps the most idle GPUs anyway (ties: the
last), so it joins the largest leftover hole instead of opening another.

Equals ``twin.domainset.choose_domains``.

The module runs past 500 lines because it is one search: the
candidates' order, the classes, the packed value and the layers are read by
every step of the programme and by its walk back, through one ``SetScratch``.
"""

from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memset

from kilter._native._types cimport int32_t, int64_t, uint8_t, uint16_t
from kilter._native.domains cimport FleetBitmap

cdef int64_t INF = (<int64_t>1) << 62
cdef int64_t VALUE_LIMIT = (<int64_t>1) << 61  # packed values stay below, so INF plus two increments fits
cdef int32_t MAX_TAKE = 32767                     # items per class: a decision has 15 bits of count
cdef uint16_t FROM_CLOSED = 32768


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


cdef int init_set_scratch(SetScratch* ss, FleetBitmap fl) noexcept nogil:
    """Allocate the per-domain buffers and number the blocks in rank order; -1 if out of memory."""
    cdef int32_t n = fl.n_domains if fl.n_domains > 0 else 1
    cdef int32_t d, i, level, b = -1
    cdef int32_t* src
    cdef int32_t* dst
    cdef int32_t* t
    memset(ss, 0, sizeof(SetScratch))
    ss.n_domains = fl.n_domains
    ss.width = n + 1
    if fl.n_words * 64 + 1 > ss.width:
        ss.width = fl.n_words * 64 + 1
    if fl.max_groups + 1 > ss.width:
        ss.width = fl.max_groups + 1
    ss.rank_order = <int32_t*>calloc(n, sizeof(int32_t))
    ss.block = <int32_t*>calloc(n, sizeof(int32_t))
    ss.cand = <int32_t*>calloc(n, sizeof(int32_t))
    ss.tmp = <int32_t*>calloc(n, sizeof(int32_t))
    ss.key = <int32_t*>calloc(n, sizeof(int32_t))
    ss.count = <int32_t*>calloc(ss.width, sizeof(int32_t))
    ss.chosen = <uint8_t*>calloc(n, 1)
    ss.runs = <int32_t*>calloc(fl.n_levels + 1, sizeof(int32_t))
    ss.level_radix = <int64_t*>calloc(fl.n_levels + 1, sizeof(int64_t))
    ss.inc = <int64_t*>calloc(fl.n_levels + 1, sizeof(int64_t))
    ss.cls_start = <int32_t*>calloc(n + 1, sizeof(int32_t))
    ss.cls_take = <int32_t*>calloc(n, sizeof(int32_t))
    ss.cls_skip = <int32_t*>calloc(n, sizeof(int32_t))
    ss.cls_shift = <int32_t*>calloc(n, sizeof(int32_t))
    ss.cls_value = <int64_t*>calloc(n, sizeof(int64_t))
    ss.blk_first = <int32_t*>calloc(n + 1, sizeof(int32_t))
    ss.blk_levels = <int32_t*>calloc(n, sizeof(int32_t))
    ss.blk_shift = <int32_t*>calloc(n, sizeof(int32_t))
    if (ss.rank_order == NULL or ss.block == NULL or ss.cand == NULL or ss.tmp == NULL or ss.key == NULL
            or ss.count == NULL or ss.chosen == NULL or ss.runs == NULL or ss.level_radix == NULL
            or ss.inc == NULL or ss.cls_start == NULL
            or ss.cls_take == NULL or ss.cls_skip == NULL or ss.cls_shift == NULL or ss.cls_value == NULL
            or ss.blk_first == NULL or ss.blk_levels == NULL or ss.blk_shift == NULL):
        return -1
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
    free(ss.rank_order); free(ss.block); free(ss.cand); free(ss.tmp); free(ss.key); free(ss.count)
    free(ss.chosen); free(ss.runs); free(ss.level_radix); free(ss.inc); free(ss.cls_start); free(ss.cls_take)
    free(ss.cls_skip); free(ss.cls_shift); free(ss.cls_value); free(ss.blk_first); free(ss.blk_levels); free(ss.blk_shift)
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


# ---------------------------------------------------------------- the search

cdef void take_one(SetScratch* ss, int32_t i, int64_t* opened, int32_t W, int64_t shift,
                   int32_t lo, int32_t hi, uint16_t* dec) noexcept nogil:
    """take_each for a class of one item, the common case, without the loop over m.

    Unreachable cells hold INF = 2^62 and values stay below 2^61, so INF plus
    an increment is still no better than any cell: no test for INF is needed.
    """
    cdef int32_t dt = ss.cls_take[i], ds = ss.cls_skip[i], t, c, first
    cdef int64_t r = ss.cls_value[i], src, v
    cdef uint16_t take, from_closed
    cdef int64_t* cur
    cdef int64_t* below
    cdef int64_t* closed
    cdef uint16_t* d
    if ds > 0:  # an item above c*: skipping it costs ds
        for t in range(hi, lo - 1, -1):
            cur = opened + t * W
            d = dec + t * W
            for c in range(W - 1, -1, -1):
                v = cur[c - ds] if c >= ds else INF
                d[c] = 0
                if t > 0:
                    src = opened[(t - 1) * W + c]
                    if c >= shift and ss.closed[(t - 1) * W + c - shift] <= src:
                        if ss.closed[(t - 1) * W + c - shift] + r < v:
                            v = ss.closed[(t - 1) * W + c - shift] + r
                            d[c] = 1 | FROM_CLOSED
                    elif src + r < v:
                        v = src + r
                        d[c] = 1
                cur[c] = v
        return
    if lo < 1:
        memset(dec, 0, W * sizeof(uint16_t))
        lo = 1
    first = dt + <int32_t>shift if dt + shift < W else W
    for t in range(hi, lo - 1, -1):
        cur = opened + t * W
        below = opened + (t - 1) * W
        closed = ss.closed + (t - 1) * W
        d = dec + t * W
        for c in range(dt if dt < W else W):
            d[c] = 0
        for c in range(dt, first):
            src = below[c - dt] + r
            take = src < cur[c]
            cur[c] = src if take else cur[c]
            d[c] = take
        for c in range(first, W):
            from_closed = closed[c - dt - shift] <= below[c - dt]
            src = (closed[c - dt - shift] if from_closed else below[c - dt]) + r
            take = src < cur[c]
            cur[c] = src if take else cur[c]
            d[c] = take | (take & from_closed) << 15


cdef void take_each(SetScratch* ss, int32_t i, int64_t* opened, int32_t W, int64_t shift,
                    int32_t lo, int32_t hi, uint16_t* dec) noexcept nogil:
    """Open layer after class i: take m of its n items, from the open layer or a closed one (in place).

    Taking m costs m * deficit + (n - m) * excess; the open cell itself is the
    m = 0 case. Sources lie in lower rows (and, for items above c*, lower
    costs of the same row), so rows go down and costs go down.
    """
    cdef int32_t n = ss.cls_start[i + 1] - ss.cls_start[i], t, c, mm, top
    cdef int64_t dt = ss.cls_take[i], ds = ss.cls_skip[i], r = ss.cls_value[i]
    cdef int64_t best, src, v, cc
    cdef int64_t* closed = ss.closed
    cdef uint16_t choice, fc
    for t in range(hi, lo - 1, -1):
        top = n if n < t else t
        for c in range(W - 1, -1, -1):
            best = opened[t * W + c - n * ds] if c >= n * ds else INF
            choice = 0
            for mm in range(1, top + 1):
                cc = c - mm * dt - (n - mm) * ds
                if cc < 0:
                    if dt > 0:
                        break
                    continue
                src = opened[(t - mm) * W + cc]
                fc = 0
                if cc >= shift and closed[(t - mm) * W + cc - shift] <= src:
                    src = closed[(t - mm) * W + cc - shift]
                    fc = FROM_CLOSED
                v = src + mm * r
                if v < best:
                    best = v
                    choice = <uint16_t>mm | fc
            opened[t * W + c] = best
            dec[t * W + c] = choice


cdef void take_free(SetScratch* ss, int32_t i, int64_t* opened, int32_t W, int64_t shift,
                    int32_t lo, int32_t hi, uint16_t* dec) noexcept nogil:
    """take_each for a class of free items (no deficit, no excess): a monotone queue per cost column.

    Taking m costs nothing and adds m * r, so the best source for t is the
    minimum of row[t'] - t' * r over t - n <= t' < t; ties keep the larger t'
    (fewer items), as take_each does.
    """
    cdef int32_t n = ss.cls_start[i + 1] - ss.cls_start[i]
    cdef int64_t r = ss.cls_value[i], best, src, v
    cdef int32_t t, c, tt, head, tail, nxt, first = lo - n if lo - n > 0 else 0
    cdef int64_t* row = ss.row
    cdef uint8_t* row_closed = ss.row_closed
    cdef int32_t* q = ss.queue
    cdef uint16_t choice
    for c in range(W):
        for tt in range(first, hi):
            src = opened[tt * W + c]
            row_closed[tt] = 0
            if c >= shift:
                v = ss.closed[tt * W + c - shift]
                if v <= src:
                    src = v
                    row_closed[tt] = 1
            row[tt] = src
        head = 0
        tail = 0
        nxt = first
        for t in range(lo, hi + 1):
            while nxt < t:
                if row[nxt] < INF:
                    v = row[nxt] - nxt * r
                    while tail > head and row[q[tail - 1]] - q[tail - 1] * r >= v:
                        tail -= 1
                    q[tail] = nxt
                    tail += 1
                nxt += 1
            while head < tail and q[head] < t - n:
                head += 1
            best = opened[t * W + c]
            choice = 0
            if head < tail:
                tt = q[head]
                v = row[tt] + (t - tt) * r
                if v < best:
                    best = v
                    choice = <uint16_t>(t - tt) | (FROM_CLOSED if row_closed[tt] else 0)
            opened[t * W + c] = best
            dec[t * W + c] = choice


cdef void start_block(SetScratch* ss, int32_t b, int32_t layers, int64_t cells, int32_t W,
                      int32_t lo, int32_t k) noexcept nogil:
    """Merge the layers whose groups end here into the block's first closed layer; best closed source.

    Layers are met from the most closed down and replace only when strictly
    better, so ties keep the more closed layer (the earlier domains).
    """
    cdef int32_t m = ss.blk_levels[b], lam
    cdef int64_t x, first = <int64_t>lo * W, inc, v
    cdef bint better
    cdef int64_t* into = ss.val + m * cells
    cdef int64_t* layer
    cdef int64_t* closed = ss.closed
    cdef uint8_t* merged = ss.merge_from + b * cells
    cdef uint8_t* cf = ss.closed_from + b * cells
    if b > 0 and layers > 1:
        memset(merged + first, m, cells - first)
        for lam in range(m - 1, -1, -1):
            layer = ss.val + lam * cells
            for x in range(first, cells):
                better = layer[x] < into[x]
                into[x] = layer[x] if better else into[x]
                merged[x] = <uint8_t>lam if better else merged[x]
                layer[x] = INF
    for x in range(first, cells):
        closed[x] = INF
    memset(cf + first, 0, cells - first)
    for lam in range(layers - 1, 0, -1):
        layer = ss.val + lam * cells
        inc = ss.inc[lam]
        for x in range(first, cells):
            v = layer[x] + inc
            better = v < closed[x]
            closed[x] = v if better else closed[x]
            cf[x] = <uint8_t>lam if better else cf[x]


cdef void end_block(SetScratch* ss, int64_t shift, int32_t layers, int64_t cells, int32_t W,
                    int32_t lo, int32_t k) noexcept nogil:
    """Closed layers skipped every item of the block: shift their losses by the block's excess."""
    cdef int32_t lam, t, c
    cdef int64_t* layer
    if shift == 0:
        return
    for lam in range(1, layers):
        layer = ss.val + lam * cells
        for t in range(lo, k + 1):
            for c in range(W - 1, -1, -1):
                layer[t * W + c] = layer[t * W + c - shift] if c >= shift else INF


cdef int32_t choose_one(FleetBitmap fl, SetScratch* ss, const int32_t* caps, const uint8_t* live,
                        int64_t need, int32_t* out_domain, int32_t* out_units) noexcept nogil:
    """choose_set when one domain covers the need: least capacity, partly used, fewest idle GPUs, first in rank order.

    (With one domain every group count is 1, and the search order breaks the
    remaining ties by block in rank order, then index: rank order.)
    """
    cdef int32_t i, d, best = -1
    for i in range(fl.n_domains):
        d = ss.rank_order[i]
        if not live[d] or caps[d] < need:
            continue
        if best < 0 or caps[d] < caps[best] or caps[d] == caps[best] and (
                fl.is_wholly_free(d) < fl.is_wholly_free(best) or fl.is_wholly_free(d) == fl.is_wholly_free(best)
                and fl.domain_free[d] < fl.domain_free[best]):
            best = d
    out_domain[0] = best
    out_units[0] = <int32_t>need
    return 1


cdef int32_t choose_set(FleetBitmap fl, SetScratch* ss, const int32_t* caps, const uint8_t* live,
                        int64_t need, int64_t unit_gpus, int32_t* out_domain, int32_t* out_units) noexcept nogil:
    """OUT the chosen domains in rank order and the units each takes; returns how many (0: none cover need; -1: no memory)."""
    cdef int32_t cap_width = fl.n_words * 64, c_star = 0, k, n_cand, n_blk = 0, n_cls, active, layers
    cdef int32_t W, b, i, j, t, c, lam, lo, hi, n, mm, d, cnt, hole = 0
    cdef int64_t slack = 0, rest, cells, x, v, shift, best_g = 0, best_r = 0, keep, best_keep = 0, spare
    cdef int32_t best_c = -1, best_lam = 0
    cdef uint16_t dec
    k = fewest(ss, caps, live, need, cap_width, &c_star, &slack)
    if k == 0:
        return 0
    if k == 1:
        return choose_one(fl, ss, caps, live, need, out_domain, out_units)
    n_cand = sort_candidates(fl, ss, caps, live, <int32_t>(c_star - slack), cap_width)
    active = cut_classes(fl, ss, caps, n_cand, c_star, &n_blk)
    n_cls = ss.blk_first[n_blk]
    rest = pack(fl, ss, caps, n_cand, n_cls, k, active)
    layers = active + 1
    W = <int32_t>slack + 1
    cells = <int64_t>(k + 1) * W
    if reserve(ss, layers, cells, k, n_cls, n_blk) != 0:
        return -1
    for x in range(layers * cells):
        ss.val[x] = INF
    ss.val[active * cells] = 0
    for b in range(n_blk):
        lo = k - (n_cand - ss.cls_start[ss.blk_first[b]])
        start_block(ss, b, layers, cells, W, lo if lo > 0 else 0, k)
        shift = 0
        for i in range(ss.blk_first[b], ss.blk_first[b + 1]):
            n = ss.cls_start[i + 1] - ss.cls_start[i]
            lo = k - (n_cand - ss.cls_start[i + 1])
            hi = ss.cls_start[i + 1] if ss.cls_start[i + 1] < k else k
            ss.cls_shift[i] = <int32_t>shift
            if n == 1:
                take_one(ss, i, ss.val, W, shift, lo if lo > 0 else 0, hi, ss.decided + i * cells)
            elif ss.cls_take[i] == 0 and ss.cls_skip[i] == 0:
                take_free(ss, i, ss.val, W, shift, lo if lo > 0 else 0, hi, ss.decided + i * cells)
            else:
                take_each(ss, i, ss.val, W, shift, lo if lo > 0 else 0, hi, ss.decided + i * cells)
            shift += <int64_t>n * ss.cls_skip[i]
            if shift > slack:
                shift = slack + 1
        ss.blk_shift[b] = <int32_t>shift
        lo = k - (n_cand - ss.cls_start[ss.blk_first[b + 1]])
        end_block(ss, shift, layers, cells, W, lo if lo > 0 else 0, k)

    # Fewest groups, then the largest loss (least capacity), then the rest; ties to the more closed layer.
    for lam in range(active, -1, -1):
        for c in range(W):
            v = ss.val[lam * cells + <int64_t>k * W + c]
            if v >= INF:
                continue
            if best_c < 0 or v // rest < best_g or (v // rest == best_g and (
                    c > best_c or (c == best_c and v % rest < best_r))):
                best_g = v // rest
                best_r = v % rest
                best_c = c
                best_lam = lam
    if best_c < 0:
        return 0
    lam = best_lam
    t = k
    c = best_c
    for b in range(n_blk - 1, -1, -1):
        if lam >= 1:
            c -= ss.blk_shift[b]
        for i in range(ss.blk_first[b + 1] - 1, ss.blk_first[b] - 1, -1):
            if lam != 0:
                break
            dec = ss.decided[i * cells + <int64_t>t * W + c]
            n = ss.cls_start[i + 1] - ss.cls_start[i]
            mm = dec & 32767
            for j in range(mm):
                ss.chosen[ss.cand[ss.cls_start[i] + j]] = 1
            t -= mm
            c -= mm * ss.cls_take[i] + (n - mm) * ss.cls_skip[i]
            if dec & FROM_CLOSED:
                c -= ss.cls_shift[i]
                lam = ss.closed_from[b * cells + <int64_t>t * W + c]
        if b > 0 and layers > 1 and lam == ss.blk_levels[b]:
            lam = ss.merge_from[b * cells + <int64_t>t * W + c]

    # Rank order; every domain full but the one that keeps the most idle GPUs anyway (ties: the last).
    cnt = 0
    spare = -need
    for i in range(fl.n_domains):
        d = ss.rank_order[i]
        if ss.chosen[d]:
            ss.chosen[d] = 0
            out_domain[cnt] = d
            out_units[cnt] = caps[d]
            spare += caps[d]
            keep = fl.domain_free[d] - caps[d] * unit_gpus
            if cnt == 0 or keep >= best_keep:
                best_keep = keep
                hole = cnt
            cnt += 1
    out_units[hole] -= <int32_t>spare
    return cnt


def choose_domains(
    FleetBitmap fleet,
    const int32_t[::1] caps,
    const uint8_t[::1] live,
    int64_t need,
    int64_t unit_gpus,
    int32_t[::1] out_domain,
    int32_t[::1] out_units,
):
    """Choose the domains for ``need`` units, ``caps[d]`` of which fit in domain d; returns how many (0: none cover it).

    OUT ``out_domain``/``out_units`` (one entry per domain): the chosen domains
    in rank order and the units each takes. ``unit_gpus`` (GPUs per unit)
    decides which domain keeps the slack. plan_gang calls the same search.
    """
    cdef int32_t n, d, width = fleet.n_words * 64
    cdef SetScratch ss
    if caps.shape[0] != fleet.n_domains or live.shape[0] != fleet.n_domains:
        raise ValueError("caps and live need one entry per domain")
    if out_domain.shape[0] < fleet.n_domains or out_units.shape[0] < fleet.n_domains:
        raise ValueError("out_domain and out_units need one entry per domain")
    for d in range(fleet.n_domains):
        if caps[d] < 0 or caps[d] > width:
            raise ValueError(f"caps[{d}] outside 0..{width}")
    if need < 1 or unit_gpus < 1:
        raise ValueError("need and unit_gpus must be >= 1")
    try:
        if init_set_scratch(&ss, fleet) != 0:
            raise MemoryError()
        if fleet.n_domains == 0:
            return 0
        with nogil:
            n = choose_set(fleet, &ss, &caps[0], &live[0], need, unit_gpus, &out_domain[0], &out_units[0])
        if n < 0:
            raise MemoryError()
        return n
    finally:
        free_set_scratch(&ss)

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

The candidates, their classes and the packed value are prepared in
candidates.pyx; this module is the programme and its walk back.
"""

from libc.string cimport memset

from kilter._native._types cimport int32_t, int64_t, uint8_t, uint16_t
from kilter._native.candidates cimport (
    FROM_CLOSED,
    INF,
    SetScratch,
    cut_classes,
    fewest,
    free_set_scratch,
    init_set_scratch,
    pack,
    reserve,
    sort_candidates,
)
from kilter._native.domains cimport FleetBitmap


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
    init_set_scratch(&ss, fleet)
    try:
        if fleet.n_domains == 0:
            return 0
        with nogil:
            n = choose_set(fleet, &ss, &caps[0], &live[0], need, unit_gpus, &out_domain[0], &out_units[0])
        if n < 0:
            raise MemoryError()
        return n
    finally:
        free_set_scratch(&ss)

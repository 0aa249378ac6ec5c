# cython: language_level=3
"""The fleet bitmap model: build once, then change one node at a time.

Each scale-up domain (an NVLink clique, a UALink rack, or an 8-GPU xGMI node)
is a row of 64-bit words with one bit per GPU. Planning and scoring read the
derived counts (``domain_free``, ``hist``, ``group_free``) instead of walking
nodes, which is why every change goes through ``write_node``: it keeps those
counts exact in O(1) per node. Equals ``twin.domains.FleetBitmap``.
"""

import numpy as np

from kilter._native._types cimport (
    DOMAIN_DETACHED,
    int16_t,
    int32_t,
    int64_t,
    kilter_popcount,
    uint8_t,
    word_t,
)

DETACHED = DOMAIN_DETACHED
WORD_BITS = 64


cdef inline word_t span_mask(int off, int take) noexcept nogil:
    if take >= 64:
        return ~(<word_t>0)
    return ((<word_t>1 << take) - 1) << off


cdef inline int count_bits(const word_t* row, int start, int length) noexcept nogil:
    """Set bits of ``row`` in [start, start + length)."""
    cdef int w = start >> 6
    cdef int off = start & 63
    cdef int n = 0
    cdef int take
    while length > 0:
        take = 64 - off
        if take > length:
            take = length
        n += kilter_popcount(row[w] & span_mask(off, take))
        length -= take
        w += 1
        off = 0
    return n


cdef inline void fill_bits(word_t* row, int start, int length, int nset) noexcept nogil:
    """Clear [start, start + length) of ``row``, then set its first ``nset`` bits."""
    cdef int w = start >> 6
    cdef int off = start & 63
    cdef int take, ones
    cdef word_t mask
    while length > 0:
        take = 64 - off
        if take > length:
            take = length
        mask = span_mask(off, take)
        row[w] &= ~mask
        ones = nset if nset < take else take
        if ones > 0:
            row[w] |= span_mask(off, ones)
            nset -= ones
        length -= take
        w += 1
        off = 0


def _as_int32(name, values, n=None):
    arr = np.ascontiguousarray(values, dtype=np.int32)
    if arr.ndim != 1 or (n is not None and arr.shape[0] != n):
        raise ValueError(f"{name} must be a 1-d array of length {n}")
    return arr


cdef class FleetBitmap:
    """Bitmaps of idle and usable GPUs per scale-up domain, plus exact counts.

    Built from per-node arrays that the caller ordered by (domain, node name),
    so index order is name order and ties broken by index are broken by name.
    Not thread-safe: callers serialize changes and plans.
    """

    def __init__(
        self,
        node_domain,
        node_gpus,
        node_used,
        node_usable,
        node_start,
        tray_bits,
        platform,
        flags,
        group,
    ):
        nd = _as_int32("node_start", node_start)
        if nd.shape[0] < 1:
            raise ValueError("node_start needs n_domains + 1 entries")
        n_domains = nd.shape[0] - 1
        dom = _as_int32("node_domain", node_domain)
        n_nodes = dom.shape[0]
        gpus = _as_int32("node_gpus", node_gpus, n_nodes)
        used = _as_int32("node_used", node_used, n_nodes)
        usable = np.ascontiguousarray(node_usable, dtype=np.uint8)
        if usable.shape != (n_nodes,):
            raise ValueError("node_usable must have one entry per node")
        tb = _as_int32("tray_bits", tray_bits, n_domains)
        plat = np.ascontiguousarray(platform, dtype=np.int16)
        if plat.shape != (n_domains,):
            raise ValueError("platform must have one entry per domain")
        flg = np.ascontiguousarray(flags, dtype=np.uint8)
        if flg.shape != (n_domains,):
            raise ValueError("flags must have one entry per domain")
        grp = np.ascontiguousarray(group, dtype=np.int32)
        if grp.ndim != 2 or grp.shape[1] != n_domains:
            raise ValueError("group must have shape (n_levels, n_domains)")

        if nd[0] != 0 or nd[n_domains] != n_nodes or np.any(np.diff(nd) < 0):
            raise ValueError("node_start must rise from 0 to n_nodes")
        if n_nodes and not np.array_equal(dom, np.repeat(np.arange(n_domains, dtype=np.int32), np.diff(nd))):
            raise ValueError("node_domain must list nodes grouped by domain, in node_start order")
        if np.any(tb <= 0) or np.any(tb & (tb - 1)):
            raise ValueError("tray_bits must be powers of two")
        if np.any(gpus <= 0) or (n_nodes and np.any(gpus > tb[dom])):
            raise ValueError("every node needs 1..tray_bits GPUs")
        if np.any(used < 0) or np.any(used > gpus):
            raise ValueError("node_used must lie in 0..node_gpus")
        if np.any(gpus > 32767):
            raise ValueError("node_gpus above 32767")
        if np.any(grp < -1):
            raise ValueError("group indices must be >= -1")

        slots = np.diff(nd).astype(np.int64)
        bits = slots * tb
        n_words = int(max(1, int(((bits + 63) // 64).max()) if n_domains else 1))
        n_levels = grp.shape[0]
        n_groups = (grp.max(axis=1) + 1).astype(np.int32) if n_domains and n_levels else np.zeros(n_levels, np.int32)
        max_groups = int(max(1, int(n_groups.max()) if n_levels else 1))

        self.n_nodes = n_nodes
        self.n_domains = n_domains
        self.n_words = n_words
        self.n_levels = n_levels
        self.max_gpus = int(gpus.max()) if n_nodes else 0
        self.max_groups = max_groups

        self.free = np.zeros((n_domains, n_words), dtype=np.uint64)
        self.healthy = np.zeros((n_domains, n_words), dtype=np.uint64)
        self.node_start = nd
        self.tray_bits = tb
        self.domain_free = np.zeros(n_domains, dtype=np.int32)
        self.domain_usable = np.zeros(n_domains, dtype=np.int32)
        self.hist = np.zeros((n_domains, self.max_gpus + 1), dtype=np.int32)
        self.platform = plat
        self.flags = flg
        self.group = grp
        self.n_groups = n_groups
        self.group_free = np.zeros((n_levels, max_groups), dtype=np.int64)
        self.group_usable = np.zeros((n_levels, max_groups), dtype=np.int64)
        self.node_domain = dom
        self.node_gpus = gpus.astype(np.int16)
        self.node_used = used.astype(np.int16)
        self.node_usable = usable

        cdef int32_t i
        with nogil:
            for i in range(self.n_nodes):
                self.write_node(i)

    # ---- cdef core ----

    cdef int node_free(self, int32_t node) noexcept nogil:
        cdef int32_t d = self.node_domain[node]
        cdef int32_t tb = self.tray_bits[d]
        return count_bits(&self.free[d, 0], (node - self.node_start[d]) * tb, tb)

    cdef void write_node(self, int32_t node) noexcept nogil:
        """Re-derive one node's bits and every count that includes it."""
        cdef int32_t d = self.node_domain[node]
        cdef int32_t tb = self.tray_bits[d]
        cdef int start = (node - self.node_start[d]) * tb
        cdef int old_h = count_bits(&self.healthy[d, 0], start, tb)
        cdef int old_f = count_bits(&self.free[d, 0], start, tb)
        cdef int new_h = 0
        cdef int new_f = 0
        cdef int32_t level, g
        if self.node_usable[node]:
            new_h = self.node_gpus[node]
            new_f = self.node_gpus[node] - self.node_used[node]
        fill_bits(&self.healthy[d, 0], start, tb, new_h)
        fill_bits(&self.free[d, 0], start, tb, new_f)
        self.domain_free[d] += new_f - old_f
        self.domain_usable[d] += new_h - old_h
        if old_h > 0:
            self.hist[d, old_f] -= 1
        if new_h > 0:
            self.hist[d, new_f] += 1
        for level in range(self.n_levels):
            g = self.group[level, d]
            if g >= 0:
                self.group_free[level, g] += new_f - old_f
                self.group_usable[level, g] += new_h - old_h

    cdef int take(self, int32_t node, int32_t gpus) noexcept nogil:
        if not self.node_usable[node] or self.node_gpus[node] - self.node_used[node] < gpus:
            return -1
        self.node_used[node] += gpus
        self.write_node(node)
        return 0

    cdef int give(self, int32_t node, int32_t gpus) noexcept nogil:
        if self.node_used[node] < gpus:
            return -1
        self.node_used[node] -= gpus
        self.write_node(node)
        return 0

    cdef bint is_wholly_free(self, int32_t domain) noexcept nogil:
        return self.domain_usable[domain] > 0 and self.domain_free[domain] == self.domain_usable[domain]

    # ---- Python surface ----

    def _check_node(self, node):
        if not 0 <= node < self.n_nodes:
            raise IndexError(f"node index {node} outside 0..{self.n_nodes - 1}")

    def allocate(self, int32_t node, int32_t gpus):
        """Book ``gpus`` GPUs on ``node`` (a pod was bound there)."""
        self._check_node(node)
        if gpus < 0:
            raise ValueError("gpus must be >= 0")
        if self.take(node, gpus) != 0:
            raise ValueError(
                f"node {node} has {self.node_free(node)} idle GPUs"
                f"{'' if self.node_usable[node] else ' and is unusable'}; cannot book {gpus}"
            )

    def release(self, int32_t node, int32_t gpus):
        """Return ``gpus`` GPUs of ``node`` (a pod ended or was deleted)."""
        self._check_node(node)
        if gpus < 0:
            raise ValueError("gpus must be >= 0")
        if self.give(node, gpus) != 0:
            raise ValueError(f"node {node} holds {self.node_used[node]} booked GPUs; cannot release {gpus}")

    def set_usable(self, int32_t node, bint usable):
        """Mark a node usable or not (cordon, NotReady, lost fabric label)."""
        self._check_node(node)
        self.node_usable[node] = 1 if usable else 0
        self.write_node(node)

    def node_free_gpus(self, int32_t node):
        self._check_node(node)
        return self.node_free(node)

    def capacity(self, int32_t gpus):
        """Pods of ``gpus`` GPUs each that fit in every domain right now."""
        if gpus <= 0:
            raise ValueError("gpus must be >= 1")
        out = np.zeros(self.n_domains, dtype=np.int32)
        cdef int32_t[::1] o = out
        cdef int32_t d, k
        cdef int64_t c
        with nogil:
            for d in range(self.n_domains):
                c = 0
                for k in range(gpus, self.max_gpus + 1):
                    c += self.hist[d, k] * (k // gpus)
                o[d] = <int32_t>c
        return out

    def wholly_free(self):
        """1 for each domain whose usable GPUs are all idle."""
        out = np.zeros(self.n_domains, dtype=np.uint8)
        cdef uint8_t[::1] o = out
        cdef int32_t d
        for d in range(self.n_domains):
            o[d] = self.is_wholly_free(d)
        return out

    @property
    def free_words(self):
        return np.asarray(self.free).copy()

    @property
    def healthy_words(self):
        return np.asarray(self.healthy).copy()

    @property
    def domain_free_gpus(self):
        return np.asarray(self.domain_free).copy()

    @property
    def domain_usable_gpus(self):
        return np.asarray(self.domain_usable).copy()

    @property
    def node_used_gpus(self):
        return np.asarray(self.node_used).astype(np.int32)

    @property
    def node_gpu_counts(self):
        return np.asarray(self.node_gpus).astype(np.int32)

    @property
    def node_usable_flags(self):
        return np.asarray(self.node_usable).copy()

    @property
    def node_domains(self):
        return np.asarray(self.node_domain).copy()

    @property
    def domain_node_start(self):
        return np.asarray(self.node_start).copy()

    @property
    def domain_platforms(self):
        return np.asarray(self.platform).copy()

    @property
    def domain_flags(self):
        return np.asarray(self.flags).copy()

    @property
    def domain_groups(self):
        return np.asarray(self.group).copy()

    @property
    def free_histogram(self):
        return np.asarray(self.hist).copy()

    def group_free_gpus(self, int32_t level):
        if not 0 <= level < self.n_levels:
            raise IndexError(f"level {level} outside 0..{self.n_levels - 1}")
        return np.asarray(self.group_free[level, : self.n_groups[level]]).copy()

    def group_usable_gpus(self, int32_t level):
        if not 0 <= level < self.n_levels:
            raise IndexError(f"level {level} outside 0..{self.n_levels - 1}")
        return np.asarray(self.group_usable[level, : self.n_groups[level]]).copy()

    @property
    def nbytes(self):
        """Bytes held by the model's arrays (names and labels live outside)."""
        arrays = [
            np.asarray(self.free), np.asarray(self.healthy), np.asarray(self.node_start),
            np.asarray(self.tray_bits), np.asarray(self.domain_free), np.asarray(self.domain_usable),
            np.asarray(self.hist), np.asarray(self.platform), np.asarray(self.flags),
            np.asarray(self.group), np.asarray(self.n_groups), np.asarray(self.group_free),
            np.asarray(self.group_usable), np.asarray(self.node_domain), np.asarray(self.node_gpus),
            np.asarray(self.node_used), np.asarray(self.node_usable),
        ]
        return int(sum(a.nbytes for a in arrays))

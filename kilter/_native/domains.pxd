# The fleet as bitmaps: one row of GPU bits per scale-up domain.
#
# Layout. Domain d holds the nodes node_start[d] .. node_start[d+1]-1, in name
# order; node i sits in slot s = i - node_start[d] and owns the bits
# [s*tb, s*tb + tb) of the row, tb = tray_bits[d], a power of two, so a slot
# never straddles a word when tb <= 64. A node's idle GPUs are the *low* bits of
# its slot: which physical GPU is idle is the device plugin's business, the
# count is ours.
#
# Truth is node_used and node_usable; every other field is derived from them,
# node by node, whenever one of them changes (never a rebuild per decision).

from kilter._native._types cimport int16_t, int32_t, int64_t, uint8_t, word_t

cdef class FleetBitmap:
    # ---- sizes ----
    cdef readonly int32_t n_nodes
    cdef readonly int32_t n_domains
    cdef readonly int32_t n_words       # words per domain row
    cdef readonly int32_t n_levels      # levels above the domain (block, spine, ...)
    cdef readonly int32_t max_gpus      # largest node_gpus; width of hist is max_gpus + 1
    cdef readonly int32_t max_groups    # width of the group_* tables

    # ---- per domain ----
    cdef word_t[:, ::1] free            # [domain, word]: 1 = idle GPU on a usable node; invariant free & ~healthy == 0
    cdef word_t[:, ::1] healthy         # [domain, word]: every GPU bit of every usable node
    cdef int32_t[::1] node_start        # [domain + 1]: CSR offsets into the node arrays, non-decreasing
    cdef int32_t[::1] tray_bits         # [domain]: bits per node slot, power of two, >= node_gpus of its nodes
    cdef int32_t[::1] domain_free       # [domain]: popcount(free[d]), kept in step with free
    cdef int32_t[::1] domain_usable     # [domain]: popcount(healthy[d])
    cdef int32_t[:, ::1] hist           # [domain, k]: usable nodes of d with exactly k idle GPUs
    cdef int16_t[::1] platform          # [domain]: platform index from the catalog, >= 0
    cdef uint8_t[::1] flags             # [domain]: DOMAIN_* bits
    cdef int32_t[:, ::1] group          # [level, domain]: group index at that level, -1 = unlabeled
    cdef int32_t[::1] n_groups          # [level]: groups at that level; group < n_groups[level]
    cdef int64_t[:, ::1] group_free     # [level, group]: idle GPUs of usable nodes under the group
    cdef int64_t[:, ::1] group_usable   # [level, group]: GPUs of usable nodes under the group

    # ---- per node ----
    cdef int32_t[::1] node_domain       # [node]: its domain; node_start[node_domain[i]] <= i
    cdef int16_t[::1] node_gpus         # [node]: allocatable GPUs, 0 < node_gpus <= tray_bits
    cdef int16_t[::1] node_used         # [node]: GPUs held by bound pods, 0 <= node_used <= node_gpus
    cdef uint8_t[::1] node_usable       # [node]: 1 = Ready, schedulable, fabric healthy

    cdef int node_free(self, int32_t node) noexcept nogil
    cdef void write_node(self, int32_t node) noexcept nogil
    cdef int take(self, int32_t node, int32_t gpus) noexcept nogil
    cdef int give(self, int32_t node, int32_t gpus) noexcept nogil
    cdef bint is_wholly_free(self, int32_t domain) noexcept nogil

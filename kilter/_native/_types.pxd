# Typedefs shared by every kilter._native module.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint64_t

ctypedef uint64_t word_t

cdef extern from "bits.h" nogil:
    int kilter_popcount(uint64_t x)
    int kilter_ctz(uint64_t x)
    void kilter_prefetch(const void* p)
    uint64_t kilter_json_special(uint64_t x)

# Topology levels as the planner numbers them: 0 is one node, 1 one scale-up
# domain, 2 + i the i-th level above the domain (block, spine, ...).
cdef enum:
    LEVEL_NONE = -1
    LEVEL_NODE = 0
    LEVEL_DOMAIN = 1
    LEVEL_UP = 2

# Domain flags.
cdef enum:
    DOMAIN_DETACHED = 1   # a node whose fabric label is missing: single-pod gangs only

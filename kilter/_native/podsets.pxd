# The planner's steps over one Scratch: pod sets one after another (see podsets.pyx).

from kilter._native._types cimport int32_t, int64_t, uint8_t
from kilter._native.candidates cimport SetScratch
from kilter._native.domains cimport FleetBitmap

# Plan status codes (also the Python constants of gang.pyx).
cdef enum:
    PLAN_OK = 0
    PLAN_NO_CAPACITY = 1        # fewer idle GPUs of the right shape than the pod set needs
    PLAN_REQUIRED_TOO_SMALL = 2 # no single group at the required level holds the pod set
    PLAN_SLICES_DO_NOT_FIT = 3  # the pod set fits in total, but not as whole slices
    PLAN_NO_MEMORY = 99         # internal: the search could not grow its buffers; plan_gang raises MemoryError

# One pod set as the planner reads it (gang.PodSets checks every field once).
cdef struct PodSetAsk:
    int32_t count        # pods
    int32_t gpus         # GPUs per pod
    int32_t required     # a level (LEVEL_NONE, LEVEL_NODE, LEVEL_DOMAIN, LEVEL_UP + i) the pod set must stay within
    int32_t preferred    # a level it should stay within when it can
    int32_t slice_size   # pods per slice; 1 = no slices
    int32_t slice_level  # the level each slice must stay within
    int32_t offset       # its first pod's place in the gang's nodes

# Why a pod set failed: pods needed, and how many the best candidate offers.
cdef struct Shortfall:
    int32_t need
    int32_t offered

# Working memory of one plan call; init_scratch allocates it, free_scratch frees it.
cdef struct Scratch:
    void* memory         # the block holding every buffer below (alloc_pieces)
    int32_t* caps        # [domain]: units (slices, or pods when unsliced) that fit in the domain
    uint8_t* base        # [domain]: 1 = domain may serve the pod set at all (platform, detached rule)
    uint8_t* live        # [domain]: 1 = candidate under the current restriction; implies caps > 0
    uint8_t* in_gang     # [domain]: 1 = holds a pod of this gang already
    int32_t* order       # [domain]: live domains, caps descending, index ascending
    int32_t* bucket      # [cap_width + 1]: counting-sort buckets
    int32_t* set_domain  # [domain]: the chosen domains of the pod set, in rank order
    int32_t* set_units   # [domain]: units each of them takes
    int32_t* rank_pos    # [domain]: position in rank order (inverse of dset.rank_order)
    int32_t* node_count  # [max nodes per domain]: pods booked per node of the domain being filled
    int32_t* slice_key   # [total pods]: rank position of each slice's first domain
    int32_t* slice_order # [total pods]: slices sorted by slice_key, stable
    int32_t* moved       # [total pods]: a pod set's nodes while its slices are reordered
    SetScratch dset      # the domain-set search's own buffers
    int64_t* gsum        # [max_groups]: caps summed until the group first covers the need
    int64_t* gtotal      # [max_groups]: all caps of live domains in the group
    int32_t* gcnt        # [max_groups]: domains summed into gsum
    int32_t* gk          # [max_groups]: fewest domains of the group that cover the need; 0 = cannot
    int32_t* undo_node   # [total pods]: nodes booked by this plan, in order
    int32_t* undo_gpus   # [total pods]: GPUs booked on them
    int32_t n_undo       # entries used in undo_*
    int32_t cap_width    # caps never exceed this (n_words * 64)
    int32_t n_live       # live domains
    int32_t n_order      # entries of order

cdef int init_scratch(Scratch* sc, FleetBitmap fl, int32_t total) except -1
cdef void free_scratch(Scratch* sc) noexcept nogil
cdef int run_plan(FleetBitmap fl, Scratch* sc, const PodSetAsk* sets, const int32_t* set_order, int32_t n_sets,
                  int32_t platform, bint allow_detached, const uint8_t* node_ok,
                  int32_t* out, Shortfall* miss, int32_t* failed) noexcept nogil

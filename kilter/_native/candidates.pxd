# The domain-set search's working memory, its candidates and its objective (see candidates.pyx).

from kilter._native._types cimport int32_t, int64_t, uint8_t, uint16_t
from kilter._native.domains cimport FleetBitmap

cdef extern from *:
    """
    #define KILTER_SET_INF (((int64_t)1) << 62)
    #define KILTER_SET_VALUE_LIMIT (((int64_t)1) << 61)
    """
    const int64_t INF "KILTER_SET_INF"                  # an unreachable cell of the programme
    const int64_t VALUE_LIMIT "KILTER_SET_VALUE_LIMIT"  # packed values stay below, so INF plus two increments fits

cdef enum:
    MAX_TAKE = 32767      # items per class: a decision has 15 bits of count
    FROM_CLOSED = 32768   # the decision's 16th bit: taken from a closed layer

# Working memory of the search; one per plan_gang call, freed by free_set_scratch.
cdef struct SetScratch:
    void* memory          # the block holding every buffer up to blk_shift (alloc_pieces)
    # ---- fixed for the call (init_set_scratch) ----
    int32_t n_domains
    int32_t width         # counting-sort keys lie in 0 .. width - 1: caps, idle GPUs, blocks, groups
    int32_t* rank_order   # [domain]: domains by group path from the top level down, then index
    int32_t* block        # [domain]: its block's number in rank order; an unlabeled domain is a block alone
    # ---- per call of choose_set, sized by the fleet ----
    int32_t* cand         # [domain]: candidates (live, cap >= c* - slack) in search order
    int32_t* tmp          # [domain]: radix-sort scratch
    int32_t* key          # [domain]: radix-sort key of the current pass
    int32_t* count        # [width]: counting-sort buckets
    uint8_t* chosen       # [domain]: 1 = in the chosen set; all 0 between calls
    int32_t* runs         # [level]: level-`level` groups among the candidates (runs in search order)
    int64_t* level_radix  # [level]: radix of that level's group count in the packed value; 1 = not counted
    int64_t* inc          # [layer]: value added by taking from that layer (opening its closed levels)
    int32_t* cls_start    # [domain + 1]: first candidate of each class; cls_start[n_cls] = n_cand
    int32_t* cls_take     # [domain]: deficit c* - cap added per item taken (0 unless cap < c*)
    int32_t* cls_skip     # [domain]: excess cap - c* added per item skipped (0 unless cap > c*)
    int32_t* cls_shift    # [domain]: skip costs of the earlier classes of its block
    int64_t* cls_value    # [domain]: packed (wholly idle, cap^2, idle GPUs) of one item, each less its minimum
    int32_t* blk_first    # [domain + 1]: first class of each block; blk_first[n_blk] = n_cls
    int32_t* blk_levels   # [domain]: levels whose group changes where the block starts (0 for the first)
    int32_t* blk_shift    # [domain]: skip costs of all its classes
    # ---- the dynamic programme, grown on demand ----
    int64_t* val          # [layer, t, c]: best packed value, INF = unreachable; layer = closed levels
    int64_t* closed       # [t, c]: best of the closed layers plus the levels taking opens, at block start
    int64_t* row          # [t]: one cost column of sources, for a class of identical free items
    uint8_t* row_closed   # [t]: 1 = that source is a closed layer
    int32_t* queue        # [t]: monotone queue over row
    uint16_t* decided     # [class, t, c]: items taken (low 15 bits), bit 15 = taken from a closed layer
    uint8_t* closed_from  # [block, t, c]: the closed layer closed[t, c] came from
    uint8_t* merge_from   # [block, t, c]: the layer merged into the block's first closed layer
    int64_t cap_val, cap_closed, cap_row, cap_row_closed, cap_queue    # entries each buffer above holds
    int64_t cap_decided, cap_closed_from, cap_merge_from

cdef int init_set_scratch(SetScratch* ss, FleetBitmap fl) except -1
cdef void free_set_scratch(SetScratch* ss) noexcept nogil
cdef int reserve(SetScratch* ss, int32_t layers, int64_t cells, int32_t k, int32_t n_cls, int32_t n_blk) noexcept nogil
cdef int32_t fewest(SetScratch* ss, const int32_t* caps, const uint8_t* live, int64_t need,
                    int32_t cap_width, int32_t* c_star, int64_t* slack) noexcept nogil
cdef int32_t sort_candidates(FleetBitmap fl, SetScratch* ss, const int32_t* caps, const uint8_t* live,
                             int32_t low, int32_t cap_width) noexcept nogil
cdef int32_t cut_classes(FleetBitmap fl, SetScratch* ss, const int32_t* caps, int32_t n_cand,
                         int32_t c_star, int32_t* n_blk) noexcept nogil
cdef int64_t pack(FleetBitmap fl, SetScratch* ss, const int32_t* caps, int32_t n_cand, int32_t n_cls,
                  int32_t k, int32_t active) noexcept nogil

# Gang planning and node scoring over a FleetBitmap: the Python-facing door of the planner.

from kilter._native._types cimport int32_t
from kilter._native.podsets cimport PodSetAsk

cdef enum:
    PLAN_MAX_SCORE = 10           # kube-scheduler's MaxExtenderPriority
    PLAN_POD_LIMIT = 1073741824   # pods in one gang (2^30): offsets and totals stay far from int32's end

# A gang's pod sets as the planner reads them, checked once when built.
cdef class PodSets:
    cdef void* memory            # the block holding sets and order (alloc_pieces)
    cdef PodSetAsk* sets         # [pod set]: its ask, in input order
    cdef int32_t* order          # [pod set]: the planning order, most GPUs first, ties in input order
    cdef readonly int32_t n_sets
    cdef readonly int32_t total  # pods of all pod sets
    cdef int32_t top_level       # the highest level any pod set names (checked against the fleet's)

# What plan_gang answers: a node per pod, or why the gang does not fit.
cdef class PlanResult:
    cdef readonly int status     # OK, or the failure's code
    cdef readonly object nodes   # int32 array, a node per pod, pod sets in input order; all -1 on failure
    cdef readonly int32_t need     # pods the failing pod set needs (0 on success)
    cdef readonly int32_t offered  # pods the best candidate offers it
    cdef readonly int32_t pod_set  # the failing pod set (-1 on success)
    cdef readonly int32_t level    # the level it failed at: its required level, else its slice level

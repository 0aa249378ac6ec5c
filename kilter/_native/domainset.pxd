# The exact choice of a pod set's scale-up domains (see domainset.pyx).

from kilter._native._types cimport int32_t, int64_t, uint8_t
from kilter._native.candidates cimport SetScratch
from kilter._native.domains cimport FleetBitmap

cdef int32_t choose_set(FleetBitmap fl, SetScratch* ss, const int32_t* caps, const uint8_t* live,
                        int64_t need, int64_t unit_gpus, int32_t* out_domain, int32_t* out_units) noexcept nogil

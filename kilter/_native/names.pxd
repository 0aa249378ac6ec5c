# Node name -> index, as an open-addressing table over one buffer of UTF-8 bytes.

from kilter._native._types cimport int32_t, int64_t, uint64_t

cdef class NameIndex:
    cdef bytes buf                # every name's UTF-8 bytes, back to back
    cdef const char* data         # buf's bytes; valid while buf lives (as long as self)
    cdef int64_t[::1] offsets     # [n + 1]: name i is buf[offsets[i]:offsets[i+1]], non-decreasing
    cdef uint64_t[::1] table      # [capacity]: 0 = empty, else (hash >> 32) << 32 | (index + 1); capacity a power of two >= 2n
    cdef uint64_t mask            # capacity - 1
    cdef readonly int32_t size    # number of names

    cdef int32_t find(self, const char* s, Py_ssize_t n) noexcept nogil
    cdef int32_t find_hashed(self, const char* s, Py_ssize_t n, uint64_t h) noexcept nogil

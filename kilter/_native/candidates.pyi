# candidates.pyx declares only cdef functions (in candidates.pxd), for domainset.pyx and podsets.pyx.

# podsets.pyx declares only cdef functions (in podsets.pxd), for gang.pyx.

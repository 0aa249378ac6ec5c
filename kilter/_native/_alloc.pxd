# All-or-nothing allocation of a struct's fixed buffers: one zeroed block, cut into pieces.
#
#     cdef Pieces p
#     memset(&p, 0, sizeof(Pieces))
#     want(&p, &sc.caps, n_domains, sizeof(int32_t))
#     want(&p, &sc.live, n_domains, sizeof(uint8_t))
#     sc.memory = alloc_pieces(&p)   # every slot set, or MemoryError and none
#     ...
#     free_pieces(sc.memory)         # every piece at once
#
# One block instead of a calloc per buffer: nothing to unwind when the third
# of twenty fails, one call to free, and the planner's per-call setup costs
# one allocation, not twenty.

from libc.stdint cimport SIZE_MAX
from libc.stdlib cimport calloc, free

cdef enum:
    MAX_PIECES = 24

cdef struct Pieces:
    size_t size                 # bytes of the block so far; every piece starts 8-byte aligned
    int n                       # pieces wanted
    bint too_big                # the block would pass SIZE_MAX, or more than MAX_PIECES pieces were wanted
    void** slot[MAX_PIECES]     # where each piece's address goes
    size_t offset[MAX_PIECES]   # where each piece starts in the block


cdef inline void want(Pieces* p, void* slot, size_t count, size_t size) noexcept nogil:
    """Want a piece of ``count`` zeroed entries of ``size`` bytes (room for one at least), its address for *slot."""
    if count == 0:
        count = 1
    if p.n >= MAX_PIECES or count > (SIZE_MAX - 8 - p.size) // size:
        p.too_big = True
        return
    p.slot[p.n] = <void**>slot
    p.offset[p.n] = p.size
    p.size += (count * size + 7) & ~(<size_t>7)
    p.n += 1


cdef inline void* alloc_pieces(Pieces* p) except NULL:
    """One zeroed block for every piece wanted, each slot pointed at its piece; MemoryError, and no slot set, if not."""
    cdef char* block
    cdef int i
    if p.too_big:
        raise MemoryError()
    block = <char*>calloc(p.size if p.size > 0 else 1, 1)
    if block == NULL:
        raise MemoryError()
    for i in range(p.n):
        p.slot[i][0] = block + p.offset[i]
    return block


cdef inline void free_pieces(void* block) noexcept nogil:
    """Free what alloc_pieces returned: every piece at once (NULL is nothing)."""
    free(block)

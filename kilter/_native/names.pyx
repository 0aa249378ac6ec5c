# cython: language_level=3
"""Resolve node names to indices without a Python dict.

The extender receives up to thousands of node names per call, freshly
decoded, so their Python hashes are not cached; a dict lookup then costs a
SipHash plus a probe into a 25,000-entry table of scattered objects. Here the
names live in one contiguous buffer and an open-addressing table of int32,
hashed eight bytes at a time over the UTF-8 bytes CPython already holds for ASCII
strings. Equals ``twin.names.NameIndex``.
"""

import numpy as np

from cpython.unicode cimport PyUnicode_Check, PyUnicode_DecodeUTF8
from libc.stdlib cimport free, realloc
from libc.string cimport memcmp, memcpy

from kilter._native._types cimport int32_t, int64_t, kilter_ctz, kilter_json_special, kilter_prefetch, uint64_t

DEF BATCH = 32


cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object unicode, Py_ssize_t* size) except NULL


cdef extern from *:
    """
    #include <string.h>
    /* glibc and musl declare memmem under _GNU_SOURCE, which pyconfig.h defines on Linux; the BSDs and
       macOS always do. Elsewhere (MSVC) memchr finds the needle's second byte, rarer in JSON than '"'. */
    static const char* kilter_memmem(const char* hay, size_t n, const char* needle, size_t m) {
    #if !defined(KILTER_NO_MEMMEM) && (defined(_GNU_SOURCE) || defined(__APPLE__) || defined(__FreeBSD__) \
        || defined(__NetBSD__) || defined(__OpenBSD__) || defined(__DragonFly__))
        return (const char*)memmem(hay, n, needle, m);
    #else
        const char* p = hay + 1;
        const char* end = hay + n;
        if (m < 2) return m ? (const char*)memchr(hay, needle[0], n) : hay;
        if (n < m) return NULL;
        while ((p = (const char*)memchr(p, needle[1], (size_t)(end - p))) != NULL) {
            if ((size_t)(end - p) < m - 1) return NULL;
            if (p[-1] == needle[0] && memcmp(p + 1, needle + 2, m - 2) == 0) return p - 1;
            p++;
        }
        return NULL;
    #endif
    }
    """
    const char* kilter_memmem(const char* hay, size_t n, const char* needle, size_t m) nogil


cdef inline uint64_t load8(const char* p) noexcept nogil:
    cdef uint64_t w
    memcpy(&w, p, 8)
    return w


cdef inline uint64_t name_hash(const char* s, Py_ssize_t n) noexcept nogil:
    """Eight bytes per round (byte-wise FNV costs ~4 cycles a byte), the tail read as an overlapping word."""
    cdef uint64_t h = 0x9E3779B97F4A7C15ULL ^ <uint64_t>n
    cdef uint64_t w = 0
    cdef Py_ssize_t i
    if n >= 8:
        i = 0
        while i + 8 <= n:
            h = (h ^ load8(s + i)) * 0xff51afd7ed558ccdULL
            h ^= h >> 32
            i += 8
        if i < n:
            h = (h ^ load8(s + n - 8)) * 0xff51afd7ed558ccdULL
    else:
        for i in range(n):
            w = (w << 8) | <unsigned char>s[i]
        h = (h ^ w) * 0xff51afd7ed558ccdULL
    h ^= h >> 33
    h *= 0xc4ceb9fe1a85ec53ULL
    h ^= h >> 33
    return h


cdef inline bint same_bytes(const char* a, const char* b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i = 0
    if n < 8:
        return memcmp(a, b, n) == 0
    while i + 8 <= n:
        if load8(a + i) != load8(b + i):
            return False
        i += 8
    return i == n or load8(a + n - 8) == load8(b + n - 8)


cdef inline Py_ssize_t skip_ws(const unsigned char* p, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    while i < n and (p[i] == 0x20 or p[i] == 0x0A or p[i] == 0x0D or p[i] == 0x09):
        i += 1
    return i


cdef inline Py_ssize_t scan_string(const unsigned char* p, Py_ssize_t n, Py_ssize_t i) noexcept nogil:
    """Position of the first '"', backslash or control byte at or after i (n if none)."""
    cdef uint64_t w, hit
    while i + 8 <= n:
        memcpy(&w, p + i, 8)
        hit = kilter_json_special(w)
        if hit:
            # The lowest flagged byte is a real one (false flags only sit above it); little-endian.
            return i + (kilter_ctz(hit) >> 3)
        i += 8
    while i < n and p[i] != 0x22 and p[i] != 0x5C and p[i] >= 0x20:
        i += 1
    return i


# A NodeInfo as Go's encoding/json writes it starts {"Name":"<n>","Node":{"metadata":{"name":"<n>", ...
# (NodeInfo.Name first, then the v1.Node, whose ObjectMeta writes name first).
cdef const char* NODE_NEEDLE = b'"Node":{"metadata":{"name":"'
DEF NODE_NEEDLE_LEN = 28
cdef const char* NAME_HEAD = b'{"Name":"'
DEF NAME_HEAD_LEN = 9
DEF NO_MEMORY = -1
DEF REJECTED = -2


cdef Py_ssize_t find_headers(const unsigned char* p, Py_ssize_t n, Py_ssize_t start, Py_ssize_t floor, bint final,
                             Py_ssize_t** spans,    # OUT: malloc'd [2 * count]: name offset, name length
                             Py_ssize_t* capacity,  # IN/OUT: pairs *spans holds; the caller frees *spans
                             Py_ssize_t* resume     # OUT: where a scan of more bytes must start
                             ) noexcept nogil:
    """How many verified NodeInfo headers lie in p[start:n]; REJECTED when one fails verification,
    NO_MEMORY when *spans cannot grow.

    Each occurrence of NODE_NEEDLE is structural (inside a JSON string its quotes would be escaped),
    so each one must be a NodeInfo element: the name after it ends at a '"' (no escape, no control
    byte), and right before it sit '[' or ',', then NAME_HEAD, the same name and '",', all at or after
    ``floor`` (a header reaching below it is rejected). When ``final`` is false, p[:n] is a prefix of
    more bytes: a needle or name cut off by n is left for the next scan, which starts at *resume
    (every needle before it counted once, every one from it on not yet); when true, n is the end and
    a cut-off name is rejected.
    """
    cdef Py_ssize_t i = start, at, s, e, length, head, count = 0
    cdef const char* hit
    cdef Py_ssize_t* grown
    while True:
        hit = kilter_memmem(<const char*>(p + i), <size_t>(n - i), NODE_NEEDLE, NODE_NEEDLE_LEN)
        if hit == NULL:
            # A needle may begin in the last NODE_NEEDLE_LEN - 1 bytes and end in the next ones.
            resume[0] = n if final else max(i, n - (NODE_NEEDLE_LEN - 1))
            return count
        at = hit - <const char*>p
        s = at + NODE_NEEDLE_LEN
        e = scan_string(p, n, s)
        if e >= n and not final:
            resume[0] = at
            return count
        if e >= n or p[e] != 0x22:  # '"': else an escape, a control byte or the end
            return REJECTED
        length = e - s
        head = at - (NAME_HEAD_LEN + length + 2)
        if (head - 1 < floor or (p[head - 1] != 0x5B and p[head - 1] != 0x2C)  # '[' or ','
                or memcmp(p + head, NAME_HEAD, NAME_HEAD_LEN) != 0
                or memcmp(p + head + NAME_HEAD_LEN, p + s, length) != 0
                or p[at - 2] != 0x22 or p[at - 1] != 0x2C):  # '",'
            return REJECTED
        if count == capacity[0]:
            grown = <Py_ssize_t*>realloc(spans[0], 4 * (count + 64) * sizeof(Py_ssize_t))
            if grown == NULL:
                return NO_MEMORY
            spans[0] = grown
            capacity[0] = 2 * (count + 64)
        spans[0][2 * count] = s
        spans[0][2 * count + 1] = length
        count += 1
        i = e + 1


cdef class NameIndex:
    """Names in index order; ``lookup`` maps a list of names to their indices (-1 unknown)."""

    def __init__(self, names):
        encoded = [n.encode("utf-8") for n in names]
        self.size = len(encoded)
        offsets = np.zeros(self.size + 1, dtype=np.int64)
        if self.size:
            offsets[1:] = np.cumsum([len(b) for b in encoded])
        self.offsets = offsets
        self.buf = b"".join(encoded)
        self.data = self.buf
        cdef uint64_t capacity = 16
        while capacity < <uint64_t>(2 * self.size):
            capacity <<= 1
        self.mask = capacity - 1
        table = np.zeros(capacity, dtype=np.uint64)
        self.table = table
        cdef const char* base = self.data
        cdef int32_t i
        cdef uint64_t slot, h
        for i in range(self.size):
            if self.find(base + self.offsets[i], self.offsets[i + 1] - self.offsets[i]) >= 0:
                raise ValueError(f"duplicate name {names[i]!r}")
            h = name_hash(base + self.offsets[i], self.offsets[i + 1] - self.offsets[i])
            slot = h & self.mask
            while self.table[slot] != 0:
                slot = (slot + 1) & self.mask
            self.table[slot] = (h & 0xFFFFFFFF00000000ULL) | <uint64_t>(i + 1)

    cdef int32_t find(self, const char* s, Py_ssize_t n) noexcept nogil:
        return self.find_hashed(s, n, name_hash(s, n))

    cdef int32_t find_hashed(self, const char* s, Py_ssize_t n, uint64_t h) noexcept nogil:
        cdef uint64_t tag = h & 0xFFFFFFFF00000000ULL
        cdef uint64_t slot = h & self.mask
        cdef uint64_t entry
        cdef int32_t i
        while True:
            entry = self.table[slot]
            if entry == 0:
                return -1
            if (entry & 0xFFFFFFFF00000000ULL) == tag:
                i = <int32_t>(entry & 0xFFFFFFFFULL) - 1
                if self.offsets[i + 1] - self.offsets[i] == n and same_bytes(self.data + self.offsets[i], s, n):
                    return i
            slot = (slot + 1) & self.mask

    def lookup(self, list names, int32_t[::1] out):
        """OUT ``out[i]`` = index of ``names[i]`` or -1; returns how many were unknown.

        Names are hashed a batch at a time and their table slots prefetched
        before any is resolved, so the cache misses of one batch overlap.
        """
        cdef Py_ssize_t i, j, n = len(names), size, nb
        cdef const char* ptrs[BATCH]
        cdef Py_ssize_t lens[BATCH]
        cdef uint64_t hashes[BATCH]
        cdef int32_t unknown = 0, found
        cdef object name
        if out.shape[0] != n:
            raise ValueError("out must align with names")
        i = 0
        while i < n:
            nb = n - i if n - i < BATCH else BATCH
            for j in range(nb):
                name = names[i + j]
                if not PyUnicode_Check(name):
                    raise TypeError(f"name {i + j} is {type(name).__name__}, not str")
                ptrs[j] = PyUnicode_AsUTF8AndSize(name, &size)
                lens[j] = size
                hashes[j] = name_hash(ptrs[j], size)
                kilter_prefetch(&self.table[hashes[j] & self.mask])
            for j in range(nb):
                found = self.find_hashed(ptrs[j], lens[j], hashes[j])
                out[i + j] = found
                unknown += found < 0
            i += nb
        return unknown

    def lookup_json(self, const unsigned char[::1] data):
        """Indices of the names in a JSON array of strings, straight from its bytes.

        This is the extender's path: kube-scheduler sends ``NodeNames`` as a
        JSON array and no ``str`` object is ever built. Strings are scanned
        eight bytes at a time and resolved in batches whose table slots are
        prefetched first. Returns (indices, unknown count), or None when a
        name holds an escape (never so in a valid node name; the caller then
        decodes normally). ValueError when the bytes are not a JSON array of
        strings.
        """
        cdef Py_ssize_t n = data.shape[0], i = 0, count = 0, b, nb
        cdef const unsigned char* p = &data[0] if n else NULL
        cdef Py_ssize_t starts[BATCH]
        cdef Py_ssize_t lens[BATCH]
        cdef uint64_t hashes[BATCH]
        cdef int32_t unknown = 0, found
        cdef bint done = False
        i = skip_ws(p, n, 0)
        if i >= n or p[i] != 0x5B:  # '['
            raise ValueError("expected a JSON array of node names")
        i = skip_ws(p, n, i + 1)
        if i < n and p[i] == 0x5D:  # ']'
            if skip_ws(p, n, i + 1) != n:
                raise ValueError("trailing bytes after the JSON array")
            return np.empty(0, dtype=np.int32), 0
        out = np.empty(max(16, n // 8), dtype=np.int32)
        cdef int32_t[::1] o = out
        while not done:
            nb = 0
            while nb < BATCH and not done:
                if i >= n or p[i] != 0x22:  # '"'
                    raise ValueError(f"expected a string at byte {i}")
                starts[nb] = i + 1
                i = scan_string(p, n, i + 1)
                if i >= n:
                    raise ValueError("unterminated string")
                if p[i] == 0x5C:
                    return None
                if p[i] != 0x22:
                    raise ValueError(f"control character in a string at byte {i}")
                lens[nb] = i - starts[nb]
                hashes[nb] = name_hash(<const char*>(p + starts[nb]), lens[nb])
                kilter_prefetch(&self.table[hashes[nb] & self.mask])
                nb += 1
                i = skip_ws(p, n, i + 1)
                if i < n and p[i] == 0x2C:  # ','
                    i = skip_ws(p, n, i + 1)
                elif i < n and p[i] == 0x5D:
                    if skip_ws(p, n, i + 1) != n:
                        raise ValueError("trailing bytes after the JSON array")
                    done = True
                else:
                    raise ValueError(f"expected ',' or ']' at byte {i}")
            if count + nb > o.shape[0]:
                out = np.resize(out, 2 * (count + nb))
                o = out
            for b in range(nb):
                found = self.find_hashed(<const char*>(p + starts[b]), lens[b], hashes[b])
                o[count] = found
                unknown += found < 0
                count += 1
        return out[:count].copy(), unknown

    def lookup_nodeinfos(self, const unsigned char[::1] data, Py_ssize_t start):
        """Indices of the nodes in a JSON array of Volcano NodeInfos, found by their headers alone.

        Volcano's prioritize body carries ~15 KB per NodeInfo (a whole v1.Node, its tasks' Pods) of
        which kilter needs the name. ``data[start:]`` is searched with memmem for
        ``"Node":{"metadata":{"name":"``, which Go writes once per element right after
        ``{"Name":"<name>",``; the name must be the same in both places. The GIL is released while
        scanning and resolving. ``start`` must be at or before the array's '['.

        Returns (indices, unknown names): int32 [elements, in order], -1 for a name not in the index,
        and the names of those -1 entries as str, in order (a known one is already the index's own
        name, so no str is built for it). None when no element is found, a name holds an escape, a
        control byte or invalid UTF-8, or any header fails verification: the caller then decodes the
        body in full. An element whose ``Node`` is null has no header and is not counted (Volcano
        never offers such a node: its snapshot keeps Ready nodes only). Equals
        ``twin.NameIndex.lookup_nodeinfos``; the same as ``scan_nodeinfos(data, start, floor=start,
        final=True)`` with no element or a failure read as None.
        """
        out, unknown, _, ok = self.scan_nodeinfos(data, start, floor=start, final=True)
        if not ok or not len(out):
            return None
        return out, unknown

    def scan_nodeinfos(self, const unsigned char[::1] data, Py_ssize_t start, *, Py_ssize_t floor, bint final):
        """``lookup_nodeinfos`` for a body read a piece at a time: what ``data[start:]`` holds, and where to go on.

        Returns (indices, unknown names, resume, ok). Headers are verified as ``lookup_nodeinfos``
        does, none reaching below ``floor`` (0 <= floor <= start): the array's marker when ``data``
        holds it, else data's first byte, before which the caller has nothing. When ``final`` is
        false, ``data`` is a prefix of more bytes: a needle or a name that ``data`` cuts off is not
        read, and ``resume`` (>= start) is where the next scan, of these bytes and more, must start
        so that every element is found exactly once. A header found from ``resume`` on begins (with
        its '[' or ',') no earlier than ``resume`` - 12 - its name's length, so the caller need keep
        only that many bytes before ``resume``. When ``final`` is true, ``data`` ends the body and
        ``resume`` is its length. ok is False (and no indices) when a name holds an escape, a
        control byte or invalid UTF-8, or a header fails verification. A body fed in pieces this way
        gives the indices ``lookup_nodeinfos(body, start)`` gives, or a failure where that gives
        None. Equals ``twin.NameIndex.scan_nodeinfos``.
        """
        cdef Py_ssize_t n = data.shape[0], count = 0, i = 0, j, nb, resume = start
        cdef const unsigned char* p
        cdef Py_ssize_t* spans = NULL
        cdef Py_ssize_t capacity = 0
        cdef uint64_t hashes[BATCH]
        cdef int32_t[::1] o
        if start < 0 or start > n:
            raise ValueError(f"start {start} is outside the {n} bytes")
        if floor < 0 or floor > start:
            raise ValueError(f"floor {floor} is not between 0 and start {start}")
        if n - start < NODE_NEEDLE_LEN:
            return np.empty(0, dtype=np.int32), [], n if final else max(start, n - (NODE_NEEDLE_LEN - 1)), True
        p = &data[0]
        try:
            with nogil:
                count = find_headers(p, n, start, floor, final, &spans, &capacity, &resume)
            if count == NO_MEMORY:
                raise MemoryError()
            if count == REJECTED:
                return np.empty(0, dtype=np.int32), [], start, False
            out = np.empty(count, dtype=np.int32)
            o = out
            with nogil:
                while i < count:
                    nb = count - i if count - i < BATCH else BATCH
                    for j in range(nb):
                        hashes[j] = name_hash(<const char*>(p + spans[2 * (i + j)]), spans[2 * (i + j) + 1])
                        kilter_prefetch(&self.table[hashes[j] & self.mask])
                    for j in range(nb):
                        o[i + j] = self.find_hashed(
                            <const char*>(p + spans[2 * (i + j)]), spans[2 * (i + j) + 1], hashes[j]
                        )
                    i += nb
            unknown = []
            for j in range(count):
                if o[j] < 0:
                    unknown.append(PyUnicode_DecodeUTF8(<const char*>(p + spans[2 * j]), spans[2 * j + 1], NULL))
            return out, unknown, resume, True
        except UnicodeDecodeError:
            return np.empty(0, dtype=np.int32), [], start, False
        finally:
            free(spans)

    def index(self, str name):
        """Index of one name, or -1."""
        cdef Py_ssize_t size
        cdef const char* s = PyUnicode_AsUTF8AndSize(name, &size)
        return self.find(s, size)

    def __len__(self):
        return self.size

    @property
    def nbytes(self):
        return len(self.buf) + np.asarray(self.offsets).nbytes + np.asarray(self.table).nbytes

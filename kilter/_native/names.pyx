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

from cpython.unicode cimport PyUnicode_Check
from libc.string cimport memcmp, memcpy

from kilter._native._types cimport int32_t, int64_t, kilter_ctz, kilter_json_special, kilter_prefetch, uint64_t

DEF BATCH = 32


cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object unicode, Py_ssize_t* size) except NULL


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

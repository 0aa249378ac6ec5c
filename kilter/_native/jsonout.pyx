# cython: language_level=3
"""Write the extender's JSON answers straight from node indices.

A filter over 5,000 nodes answers with every one of them — in ``NodeNames``
or under a reason in ``FailedNodes`` — and a prioritize with a score for
each. Building a Python dict or list per node and encoding it costs about
1 µs a node, more than the whole decision. Here every node name is JSON-encoded
once per fleet, end to end in one buffer, and an answer is a length pass and a
copy pass over indices. Equals ``twin.jsonout``.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.string cimport memcpy

from kilter._native._types cimport int8_t, int32_t, int64_t

import numpy as np


_SHORT = {'"': '\\"', '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t', '\b': '\\b', '\f': '\\f'}


cdef bytes json_string(str s):
    """``s`` as a JSON string literal, escaped exactly as Python's json module (ensure_ascii off) escapes it."""
    cdef list out = ['"']
    cdef Py_UCS4 c
    for c in s:
        if c == '"' or c == '\\' or c < 0x20:
            out.append(_SHORT.get(c) or '\\u%04x' % <int>c)
        else:
            out.append(c)
    out.append('"')
    return ''.join(out).encode('utf-8')


cdef class JsonNames:
    """The fleet's node names as JSON strings, and answers written from indices into them."""

    cdef bytes _buf
    cdef int64_t[::1] _start
    cdef readonly int32_t size

    def __init__(self, list names):
        cdef list encoded = [json_string(n) for n in names]
        starts = np.zeros(len(encoded) + 1, dtype=np.int64)
        if encoded:
            np.cumsum([len(e) for e in encoded], out=starts[1:])
        self._buf = b''.join(encoded)
        self._start = starts
        self.size = len(encoded)

    cdef inline int64_t _len(self, int32_t i) except -1:
        if i < 0 or i >= self.size:
            raise IndexError(f"node index {i} outside 0..{self.size - 1}")
        return self._start[i + 1] - self._start[i]

    cdef inline int64_t _put_name(self, char* o, int64_t pos, int32_t i) noexcept:
        """Copy node ``i``'s JSON string to ``o + pos`` (``i`` already checked by ``_len``); the position after it."""
        cdef int64_t ln = self._start[i + 1] - self._start[i]
        memcpy(o + pos, PyBytes_AS_STRING(self._buf) + self._start[i], ln)
        return pos + ln

    def name(self, int32_t i):
        """The JSON string of node ``i`` (with its quotes)."""
        self._len(i)
        return self._buf[self._start[i]:self._start[i + 1]]

    def array(self, const int32_t[::1] idx):
        """``["a","b",…]`` for these nodes, in this order."""
        cdef Py_ssize_t n = idx.shape[0], k
        cdef int64_t total = 2 + (n - 1 if n > 0 else 0)
        for k in range(n):
            total += self._len(idx[k])
        out = PyBytes_FromStringAndSize(NULL, total)
        cdef char* o = PyBytes_AS_STRING(out)
        cdef int64_t pos = 1
        o[0] = b'['
        for k in range(n):
            if k:
                o[pos] = b','
                pos += 1
            pos = self._put_name(o, pos, idx[k])
        o[pos] = b']'
        if pos + 1 != total:
            raise SystemError("jsonout: length pass and copy pass disagree")
        return out

    def object(self, const int32_t[::1] idx, const int32_t[::1] value_of, list values):
        """``{"a":V,"b":W,…}``: node ``idx[k]`` maps to ``values[value_of[k]]``, already-encoded JSON bytes."""
        cdef Py_ssize_t n = idx.shape[0], k, nv = len(values)
        if value_of.shape[0] != n:
            raise ValueError("value_of must align with idx")
        cdef int64_t[::1] vlen = np.empty(max(nv, 1), dtype=np.int64)
        cdef int32_t v
        for k in range(nv):
            if not isinstance(values[k], bytes):
                raise TypeError("values must be bytes")
            vlen[k] = len(<bytes>values[k])
        cdef int64_t total = 2 + (n - 1 if n > 0 else 0)
        for k in range(n):
            v = value_of[k]
            if v < 0 or v >= nv:
                raise IndexError(f"value index {v} outside 0..{nv - 1}")
            total += self._len(idx[k]) + 1 + vlen[v]
        out = PyBytes_FromStringAndSize(NULL, total)
        cdef char* o = PyBytes_AS_STRING(out)
        cdef int64_t pos = 1
        o[0] = b'{'
        for k in range(n):
            if k:
                o[pos] = b','
                pos += 1
            pos = self._put_name(o, pos, idx[k])
            o[pos] = b':'
            pos += 1
            v = value_of[k]
            memcpy(o + pos, PyBytes_AS_STRING(<bytes>values[v]), vlen[v])
            pos += vlen[v]
        o[pos] = b'}'
        if pos + 1 != total:
            raise SystemError("jsonout: length pass and copy pass disagree")
        return out

    def host_scores(self, const int32_t[::1] idx, const int8_t[::1] scores):
        """kube-scheduler's HostPriorityList: ``[{"Host":"a","Score":7},…]``; scores 0..99."""
        cdef Py_ssize_t n = idx.shape[0], k
        cdef int8_t s
        if scores.shape[0] != n:
            raise ValueError("scores must align with idx")
        cdef int64_t total = 2 + (n - 1 if n > 0 else 0)
        for k in range(n):
            s = scores[k]
            if s < 0 or s > 99:
                raise ValueError(f"score {s} outside 0..99")
            total += self._len(idx[k]) + 18 + (2 if s > 9 else 1)  # {"Host":  ,"Score":  }
        out = PyBytes_FromStringAndSize(NULL, total)
        cdef char* o = PyBytes_AS_STRING(out)
        cdef int64_t pos = 1
        o[0] = b'['
        for k in range(n):
            if k:
                o[pos] = b','
                pos += 1
            memcpy(o + pos, b'{"Host":', 8)
            pos += 8
            pos = self._put_name(o, pos, idx[k])
            memcpy(o + pos, b',"Score":', 9)
            pos += 9
            s = scores[k]
            if s > 9:
                o[pos] = <char>(48 + s // 10)
                pos += 1
            o[pos] = <char>(48 + s % 10)
            pos += 1
            o[pos] = b'}'
            pos += 1
        o[pos] = b']'
        if pos + 1 != total:
            raise SystemError("jsonout: length pass and copy pass disagree")
        return out

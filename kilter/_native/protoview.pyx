# cython: language_level=3
"""Decode Kubernetes protobuf straight into kilter's views, skipping what kilter never reads.

A cold start lists every pod of the cluster: hundreds of megabytes of JSON
that a decoder must scan byte by byte even to skip a field. kube-apiserver
also serves core/v1 objects as protobuf (what client-go's informers ask for),
where every field carries its length, so a field kilter does not read costs
one jump. This module walks that wire format and builds the views from a
schema (``Message``) that names, per field number, the slot of the view the
value fills and how to read it; the caller supplies the view classes, so the
core knows nothing of Pods.

One ``Decoder`` serves one list (all its pages) and shares what repeats:
strings marked shared are interned, and a field marked shared (a pod's
tolerations, node selector, a container's resources) is decoded once per
distinct byte string and the same value handed to every object carrying it.
Views are never mutated, so sharing is invisible but for memory: a pod costs
about a quarter of what a JSON decode builds. Equals ``twin.protoview``.
"""

import os

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcmp, memcpy

cdef enum:
    K_STRING = 1
    K_SHARED_STRING = 2
    K_BOOL = 3
    K_INT = 4
    K_MESSAGE = 5
    K_TIME = 6
    K_QUANTITY = 7
    K_STRING_MAP = 8
    K_QUANTITY_MAP = 9
    F_REPEATED = 1
    F_SHARED = 2

STRING = K_STRING                # str
SHARED_STRING = K_SHARED_STRING  # str, interned for the decoder's life
BOOL = K_BOOL
INT = K_INT                      # int32/int64 varint, two's complement
MESSAGE = K_MESSAGE              # a nested Message
TIME = K_TIME                    # meta/v1 Time -> RFC 3339 in UTC ("...Z"), or None for a zero time
QUANTITY = K_QUANTITY            # resource.Quantity {string = 1} -> its string
STRING_MAP = K_STRING_MAP        # map<string, string> -> dict
QUANTITY_MAP = K_QUANTITY_MAP    # map<string, Quantity> -> dict[str, str]

REPEATED = F_REPEATED            # every occurrence, as a tuple
SHARED = F_SHARED                # one value per distinct encoding, handed to every object carrying it

MAGIC = b"k8s\x00"

cdef enum:
    WIRE_VARINT = 0
    WIRE_FIXED64 = 1
    WIRE_BYTES = 2
    WIRE_FIXED32 = 5


class ProtobufError(ValueError):
    """The bytes are not the protobuf the schema describes (truncated, or a field of another wire type)."""


cdef struct FieldC:
    int slot      # -1: not read
    int kind
    int flags


cdef class Message:
    """How one protobuf message becomes one view: ``build(*slots)``, with ``defaults`` for absent fields.

    ``fields`` maps a field number to ``(slot, kind, sub, flags)``; ``sub`` is
    the nested ``Message`` of a MESSAGE field. ``dedup`` shares equal views
    (by their slot values, when those are hashable) across the decoder's life.
    """

    cdef readonly object build
    cdef readonly tuple defaults
    cdef readonly dict fields
    cdef readonly bint dedup
    cdef int top
    cdef FieldC* table
    cdef list subs       # index = field number; the nested Message or None
    cdef list repeated   # slots gathered into lists while decoding, made tuples at the end

    def __cinit__(self) -> None:
        self.table = NULL

    def __init__(self, build: object, defaults: tuple, fields: dict, *, dedup: bool = False) -> None:
        cdef int number
        self.build = build
        self.defaults = tuple(defaults)
        self.fields = dict(fields)
        self.dedup = dedup
        if not all(1 <= number <= 4096 for number in self.fields):
            raise ValueError("field numbers run from 1 to 4096 here (Kubernetes' stay below 100)")
        self.top = max(self.fields, default=0)
        self.table = <FieldC*>malloc((self.top + 1) * sizeof(FieldC))
        if self.table == NULL:
            raise MemoryError()
        self.subs = [None] * (self.top + 1)
        self.repeated = []
        for number in range(self.top + 1):
            self.table[number].slot = -1
            self.table[number].kind = 0
            self.table[number].flags = 0
        for number, (slot, kind, sub, flags) in self.fields.items():
            if number < 1 or not 0 <= slot < len(self.defaults):
                raise ValueError(f"field {number}: slot {slot} is not one of the {len(self.defaults)} slots")
            if (kind == K_MESSAGE) != isinstance(sub, Message):
                raise ValueError(f"field {number}: a MESSAGE field needs a Message, and only it")
            if not K_STRING <= kind <= K_QUANTITY_MAP:
                raise ValueError(f"field {number}: unknown kind {kind}")
            if kind >= K_STRING_MAP and flags & F_REPEATED:
                raise ValueError(f"field {number}: a map is never REPEATED")
            self.table[number].slot = slot
            self.table[number].kind = kind
            self.table[number].flags = flags
            self.subs[number] = sub
            if flags & F_REPEATED and not flags & F_SHARED:
                self.repeated.append(slot)

    def __dealloc__(self) -> None:
        free(self.table)


cdef inline uint64_t _varint(const uint8_t** pp, const uint8_t* end) except? 0xFFFFFFFFFFFFFFFF:
    """The varint at ``pp`` (which moves past it); tags and short lengths take one byte."""
    cdef const uint8_t* p = pp[0]
    if p < end and p[0] < 0x80:
        pp[0] = p + 1
        return p[0]
    return _long_varint(pp, end)


cdef uint64_t _long_varint(const uint8_t** pp, const uint8_t* end) except? 0xFFFFFFFFFFFFFFFF:
    cdef const uint8_t* p = pp[0]
    cdef uint64_t value = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if p >= end or shift > 63:
            raise ProtobufError("truncated or overlong varint")
        b = p[0]
        p += 1
        value |= <uint64_t>(b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    pp[0] = p
    return value


cdef inline const uint8_t* _skip(const uint8_t* p, const uint8_t* end, int wire) except NULL:
    cdef uint64_t n
    if wire == WIRE_VARINT:
        _varint(&p, end)
        return p
    if wire == WIRE_BYTES:
        n = _varint(&p, end)
        if n > <uint64_t>(end - p):
            raise ProtobufError("a length-delimited field runs past its message")
        return p + n
    if wire == WIRE_FIXED64:
        n = 8
    elif wire == WIRE_FIXED32:
        n = 4
    else:
        raise ProtobufError(f"wire type {wire} (groups) is not used by Kubernetes")
    if n > <uint64_t>(end - p):
        raise ProtobufError("a fixed-size field runs past its message")
    return p + n


cdef inline const uint8_t* _length(const uint8_t** pp, const uint8_t* end) except NULL:
    """The end of the length-delimited value at ``pp`` (which moves past the length)."""
    cdef uint64_t n = _varint(pp, end)
    if n > <uint64_t>(end - pp[0]):
        raise ProtobufError("a length-delimited field runs past its message")
    return pp[0] + n


cdef struct Slot:
    uint64_t hash
    PyObject* text  # NULL: free
    PyObject* key   # the UTF-8 bytes it was decoded from


cdef inline uint64_t _hash(const uint8_t* p, Py_ssize_t n, uint64_t seed):
    """A fast 64-bit mix of short byte strings (label keys, names), seeded at random per decoder.

    Label values are anybody's input: without the seed, pods made to collide
    could turn a list's decode quadratic.
    """
    cdef uint64_t h = seed ^ <uint64_t>n
    cdef uint64_t word
    while n >= 8:
        memcpy(&word, p, 8)
        h = (h ^ word) * 0xBF58476D1CE4E5B9ULL
        h ^= h >> 31
        p += 8
        n -= 8
    word = 0
    if n:
        memcpy(&word, p, n)
    h = (h ^ word) * 0x94D049BB133111EBULL
    return h ^ (h >> 29)


cdef str _rfc3339(int64_t seconds):
    """UTC calendar time of Unix ``seconds``, as Go's time.RFC3339 prints it (days-from-civil inverted)."""
    cdef int64_t days = seconds // 86400
    cdef int64_t rest = seconds - days * 86400
    cdef int64_t z = days + 719468
    cdef int64_t era = (z if z >= 0 else z - 146096) // 146097
    cdef int64_t doe = z - era * 146097
    cdef int64_t yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    cdef int64_t y = yoe + era * 400
    cdef int64_t doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    cdef int64_t mp = (5 * doy + 2) // 153
    cdef int64_t d = doy - (153 * mp + 2) // 5 + 1
    cdef int64_t m = mp + 3 if mp < 10 else mp - 9
    if m <= 2:
        y += 1
    return "%04d-%02d-%02dT%02d:%02d:%02dZ" % (y, m, d, rest // 3600, rest // 60 % 60, rest % 60)


cdef class Decoder:
    """Decodes the pages of one list (or one object); what it interns and shares lives as long as it does."""

    cdef Slot* slots
    cdef uint64_t seed
    cdef size_t mask
    cdef size_t used
    cdef dict shared
    cdef dict equal
    cdef dict times

    def __cinit__(self) -> None:
        self.slots = NULL
        self.mask = 0
        self.used = 0

    def __init__(self) -> None:
        self.seed = int.from_bytes(os.urandom(8), "little")
        self.times = {}
        self.shared = {}
        self.equal = {}

    def decode(self, Message message, data: object) -> object:
        """One bare message (no envelope)."""
        cdef const uint8_t[::1] view = data
        cdef const uint8_t* p = &view[0] if len(data) else NULL
        return self._message(message, p, p + len(data))

    def unwrap(self, data: bytes) -> tuple:
        """``(apiVersion, kind, raw)`` of a ``k8s\\0``-prefixed runtime.Unknown envelope; ``raw`` is a view, not a copy."""
        cdef Py_ssize_t n = len(data)
        cdef const uint8_t[::1] view = data
        cdef const uint8_t* p
        cdef const uint8_t* end
        cdef const uint8_t* stop
        cdef const uint8_t* q
        cdef const uint8_t* q_end
        cdef uint64_t tag, inner
        cdef object api_version = "", kind = ""
        cdef Py_ssize_t raw_start = 0, raw_stop = 0
        if n < 4 or memcmp(&view[0], b"k8s\x00", 4) != 0:
            raise ProtobufError("not a Kubernetes protobuf envelope (no k8s\\0 prefix)")
        p = &view[0] + 4
        end = &view[0] + n
        while p < end:
            tag = _varint(&p, end)
            if tag == (1 << 3 | WIRE_BYTES):
                stop = _length(&p, end)
                q = p
                while q < stop:
                    inner = _varint(&q, stop)
                    if inner == (1 << 3 | WIRE_BYTES) or inner == (2 << 3 | WIRE_BYTES):
                        q_end = _length(&q, stop)
                        if inner >> 3 == 2:  # runtime.TypeMeta: apiVersion = 1, kind = 2
                            kind = PyUnicode_DecodeUTF8(<const char*>q, q_end - q, "replace")
                        else:
                            api_version = PyUnicode_DecodeUTF8(<const char*>q, q_end - q, "replace")
                        q = q_end
                    else:
                        q = _skip(q, stop, inner & 7)
                p = stop
            elif tag == (2 << 3 | WIRE_BYTES):
                stop = _length(&p, end)
                raw_start, raw_stop = p - &view[0], stop - &view[0]
                p = stop
            else:
                p = _skip(p, end, tag & 7)
        return api_version, kind, memoryview(data)[raw_start:raw_stop]

    def decode_list(self, Message meta, Message item, data: object, on_error: object = None) -> tuple:
        """``(metadata view, items)`` of a bare List message: metadata is field 1, items field 2.

        An item that does not decode is left out and ``on_error(index, message)``
        is told, so one bad object does not hold up the rest of the list.
        """
        cdef const uint8_t[::1] view = data
        cdef const uint8_t* p = &view[0] if len(data) else NULL
        cdef const uint8_t* end = p + len(data)
        cdef const uint8_t* stop
        cdef uint64_t tag
        cdef object metadata = None
        cdef list items = []
        cdef Py_ssize_t index = 0
        while p < end:
            tag = _varint(&p, end)
            if tag == (1 << 3 | WIRE_BYTES):
                stop = _length(&p, end)
                metadata = self._message(meta, p, stop)
                p = stop
            elif tag == (2 << 3 | WIRE_BYTES):
                stop = _length(&p, end)
                try:
                    items.append(self._message(item, p, stop))
                except ProtobufError as exc:
                    if on_error is None:
                        raise
                    on_error(index, str(exc))
                index += 1
                p = stop
            else:
                p = _skip(p, end, tag & 7)
        if metadata is None:
            metadata = self._message(meta, NULL, NULL)
        return metadata, items

    cdef object _text(self, const uint8_t* p, Py_ssize_t n):
        """The interned string of these UTF-8 bytes: found by the bytes, so a repeat builds no object.

        Open addressing over (hash, bytes) at most half full; the bytes are
        kept as a ``bytes`` next to the string (a string decoded with
        replacement characters no longer holds them).
        """
        cdef uint64_t h = _hash(p, n, self.seed)
        cdef size_t i
        cdef Slot* slot
        cdef object text
        if self.used * 2 >= self.mask:
            self._grow()
        i = h & self.mask
        while True:
            slot = &self.slots[i]
            if slot.text == NULL:
                break
            if slot.hash == h and PyBytes_GET_SIZE(<object>slot.key) == n and memcmp(
                PyBytes_AS_STRING(<object>slot.key), p, n
            ) == 0:
                return <object>slot.text
            i = (i + 1) & self.mask
        text = PyUnicode_DecodeUTF8(<const char*>p, n, "replace")
        key = PyBytes_FromStringAndSize(<const char*>p, n)
        Py_INCREF(text)
        Py_INCREF(key)
        slot.hash = h
        slot.text = <PyObject*>text
        slot.key = <PyObject*>key
        self.used += 1
        return text

    cdef int _grow(self) except -1:
        cdef size_t size = (self.mask + 1) * 2 if self.slots != NULL else 1024
        cdef Slot* old = self.slots
        cdef size_t old_size = self.mask + 1 if old != NULL else 0
        cdef Slot* slots = <Slot*>calloc(size, sizeof(Slot))
        cdef size_t i, j
        if slots == NULL:
            raise MemoryError()
        for i in range(old_size):
            if old[i].text != NULL:
                j = old[i].hash & (size - 1)
                while slots[j].text != NULL:
                    j = (j + 1) & (size - 1)
                slots[j] = old[i]
        self.slots = slots
        self.mask = size - 1
        free(old)
        return 0

    def __dealloc__(self) -> None:
        cdef size_t i
        if self.slots != NULL:
            for i in range(self.mask + 1):
                if self.slots[i].text != NULL:
                    Py_DECREF(<object>self.slots[i].text)
                    Py_DECREF(<object>self.slots[i].key)
            free(self.slots)

    cdef object _message(self, Message message, const uint8_t* p, const uint8_t* end):
        cdef list slots = list(message.defaults)
        cdef list gathered
        cdef const uint8_t* start
        cdef const uint8_t* q
        cdef const uint8_t* stop
        cdef uint64_t tag, next_tag
        cdef uint64_t number
        cdef int wire, slot
        cdef FieldC* f
        cdef object value, key
        for slot in message.repeated:
            slots[slot] = []
        while p < end:
            start = p
            tag = _varint(&p, end)
            number = tag >> 3
            wire = tag & 7
            if number > <uint64_t>message.top or message.table[number].slot < 0:
                p = _skip(p, end, wire)
                continue
            f = &message.table[number]
            if f.flags & F_SHARED:
                q = _skip(p, end, wire)
                while q < end:  # the run of this field's occurrences: one key for the whole value
                    stop = q
                    next_tag = _varint(&stop, end)
                    if next_tag != tag or not f.flags & F_REPEATED and f.kind < K_STRING_MAP:
                        break
                    q = _skip(stop, end, wire)
                key = (message, PyBytes_FromStringAndSize(<const char*>start, q - start))
                value = self.shared.get(key)
                if value is None:
                    value = self._run(message, f, number, tag, start, q)
                    self.shared[key] = value
                slots[f.slot] = value
                p = q
                continue
            if f.flags & F_REPEATED:
                gathered = slots[f.slot]
                gathered.append(self._value(message, f, number, wire, &p, end))
            elif f.kind >= K_STRING_MAP:
                value = slots[f.slot]
                if value is message.defaults[f.slot]:
                    value = {}
                    slots[f.slot] = value
                self._entry(f.kind, wire, &p, end, value)
            else:
                value = self._value(message, f, number, wire, &p, end)
                if f.kind > K_SHARED_STRING or len(<str>value):  # "" is Go's zero value, which JSON omits
                    slots[f.slot] = value
        for slot in message.repeated:
            gathered = slots[slot]
            slots[slot] = tuple(gathered) if gathered else message.defaults[slot]
        if message.dedup:
            key = (message, tuple(slots))
            try:
                value = self.equal.get(key)
            except TypeError:  # a slot holds a dict: not shared
                return message.build(*slots)
            if value is None:
                value = message.build(*slots)
                self.equal[key] = value
            return value
        return message.build(*slots)

    cdef object _run(self, Message message, FieldC* f, uint64_t number, uint64_t tag, const uint8_t* p,
                     const uint8_t* end):
        """The value of a shared field from its run of occurrences (each starts with ``tag``)."""
        cdef list gathered = []
        cdef dict entries
        cdef int wire = tag & 7
        if f.kind >= K_STRING_MAP:
            entries = {}
            while p < end:
                _varint(&p, end)
                self._entry(f.kind, wire, &p, end, entries)
            return entries
        while p < end:
            _varint(&p, end)
            gathered.append(self._value(message, f, number, wire, &p, end))
        if f.flags & F_REPEATED:
            return tuple(gathered) if gathered else message.defaults[f.slot]
        return gathered[len(gathered) - 1]

    cdef object _value(self, Message message, FieldC* f, uint64_t number, int wire, const uint8_t** pp,
                       const uint8_t* end):
        """One occurrence of a scalar or message field; ``pp`` moves past it."""
        cdef const uint8_t* stop
        cdef uint64_t raw
        cdef object value
        if f.kind == K_BOOL or f.kind == K_INT:
            if wire != WIRE_VARINT:
                raise ProtobufError(f"field {number}: wire type {wire}, expected a varint")
            raw = _varint(pp, end)
            if f.kind == K_BOOL:
                return raw != 0
            return <int64_t>raw
        if wire != WIRE_BYTES:
            raise ProtobufError(f"field {number}: wire type {wire}, expected length-delimited")
        stop = _length(pp, end)
        if f.kind == K_STRING or f.kind == K_SHARED_STRING:
            if f.kind == K_SHARED_STRING:
                value = self._text(pp[0], stop - pp[0])
            else:
                value = PyUnicode_DecodeUTF8(<const char*>pp[0], stop - pp[0], "replace")
        elif f.kind == K_MESSAGE:
            value = self._message(<Message>message.subs[number], pp[0], stop)
        elif f.kind == K_TIME:
            value = self._time(pp[0], stop)
        else:  # K_QUANTITY
            value = self._quantity(pp[0], stop)
        pp[0] = stop
        return value

    cdef object _time(self, const uint8_t* p, const uint8_t* end):
        cdef int64_t seconds = 0
        cdef uint64_t tag
        cdef object key, text
        if p == end:
            return None  # Go writes a zero time as an empty message; JSON has null
        while p < end:
            tag = _varint(&p, end)
            if tag == (1 << 3 | WIRE_VARINT):
                seconds = <int64_t>_varint(&p, end)
            else:
                p = _skip(p, end, tag & 7)
        key = seconds
        text = self.times.get(key)
        if text is None:
            text = _rfc3339(seconds)
            self.times[key] = text
        return text

    cdef object _quantity(self, const uint8_t* p, const uint8_t* end):
        cdef object value = ""
        cdef uint64_t tag
        cdef const uint8_t* stop
        while p < end:
            tag = _varint(&p, end)
            if tag == (1 << 3 | WIRE_BYTES):
                stop = _length(&p, end)
                value = self._text(p, stop - p)
                p = stop
            else:
                p = _skip(p, end, tag & 7)
        return value

    cdef int _entry(self, int kind, int wire, const uint8_t** pp, const uint8_t* end, dict into) except -1:
        """One map entry {key = 1, value = 2} into ``into``; keys and values are interned."""
        cdef const uint8_t* p
        cdef const uint8_t* stop
        cdef const uint8_t* vend
        cdef uint64_t tag
        cdef object key = "", value = ""
        if wire != WIRE_BYTES:
            raise ProtobufError(f"a map entry of wire type {wire}")
        stop = _length(pp, end)
        p = pp[0]
        while p < stop:
            tag = _varint(&p, stop)
            if tag == (1 << 3 | WIRE_BYTES) or tag == (2 << 3 | WIRE_BYTES):
                vend = _length(&p, stop)
                if tag >> 3 == 1:
                    key = self._text(p, vend - p)
                elif kind == K_QUANTITY_MAP:
                    value = self._quantity(p, vend)
                else:
                    value = self._text(p, vend - p)
                p = vend
            else:
                p = _skip(p, stop, tag & 7)
        into[key] = value
        pp[0] = stop
        return 0

"""Plain-Python twin of ``kilter._native.protoview``: the same decode, written for reading, not speed."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

STRING, SHARED_STRING, BOOL, INT, MESSAGE, TIME, QUANTITY, STRING_MAP, QUANTITY_MAP = range(1, 10)
REPEATED, SHARED = 1, 2
MAGIC = b"k8s\x00"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class ProtobufError(ValueError):
    pass


class Message:
    def __init__(
        self,
        build: Callable[..., Any],
        defaults: tuple[Any, ...],
        fields: Mapping[int, tuple[int, int, Message | None, int]],
        *,
        dedup: bool = False,
    ) -> None:
        if not all(1 <= number <= 4096 for number in fields):
            raise ValueError("field numbers run from 1 to 4096 here (Kubernetes' stay below 100)")
        for number, (slot, kind, sub, flags) in fields.items():
            if number < 1 or not 0 <= slot < len(defaults):
                raise ValueError(f"field {number}: slot {slot} is not one of the {len(defaults)} slots")
            if (kind == MESSAGE) != isinstance(sub, Message):
                raise ValueError(f"field {number}: a MESSAGE field needs a Message, and only it")
            if not STRING <= kind <= QUANTITY_MAP:
                raise ValueError(f"field {number}: unknown kind {kind}")
            if kind >= STRING_MAP and flags & REPEATED:
                raise ValueError(f"field {number}: a map is never REPEATED")
        self.build = build
        self.defaults = tuple(defaults)
        self.fields = dict(fields)
        self.dedup = dedup


def _varint(data: memoryview, i: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= end or shift > 63:
            raise ProtobufError("truncated or overlong varint")
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value & 0xFFFFFFFFFFFFFFFF, i
        shift += 7


def _length(data: memoryview, i: int, end: int) -> tuple[int, int]:
    n, i = _varint(data, i, end)
    if n > end - i:
        raise ProtobufError("a length-delimited field runs past its message")
    return i, i + n


def _skip(data: memoryview, i: int, end: int, wire: int) -> int:
    if wire == 0:
        return _varint(data, i, end)[1]
    if wire == 2:
        return _length(data, i, end)[1]
    if wire not in (1, 5):
        raise ProtobufError(f"wire type {wire} (groups) is not used by Kubernetes")
    n = 8 if wire == 1 else 4
    if n > end - i:
        raise ProtobufError("a fixed-size field runs past its message")
    return i + n


class Decoder:
    def __init__(self) -> None:
        self.strings: dict[str, str] = {}
        self.shared: dict[tuple[Message, bytes], Any] = {}
        self.equal: dict[tuple[Message, tuple[Any, ...]], Any] = {}

    def decode(self, message: Message, data: Any) -> Any:
        view = memoryview(data).cast("B")
        return self._message(message, view, 0, len(view))

    def unwrap(self, data: bytes) -> tuple[str, str, memoryview]:
        if data[:4] != MAGIC:
            raise ProtobufError("not a Kubernetes protobuf envelope (no k8s\\0 prefix)")
        view = memoryview(data)
        api_version = kind = ""
        raw = view[0:0]
        i, end = 4, len(view)
        while i < end:
            tag, i = _varint(view, i, end)
            if tag == (1 << 3 | 2):
                start, stop = _length(view, i, end)
                j = start
                while j < stop:
                    inner, j = _varint(view, j, stop)
                    if inner in (1 << 3 | 2, 2 << 3 | 2):
                        a, b = _length(view, j, stop)
                        text = bytes(view[a:b]).decode("utf-8", "replace")
                        if inner >> 3 == 2:  # runtime.TypeMeta: apiVersion = 1, kind = 2
                            kind = text
                        else:
                            api_version = text
                        j = b
                    else:
                        j = _skip(view, j, stop, inner & 7)
                i = stop
            elif tag == (2 << 3 | 2):
                start, i = _length(view, i, end)
                raw = view[start:i]
            else:
                i = _skip(view, i, end, tag & 7)
        return api_version, kind, raw

    def decode_list(
        self, meta: Message, item: Message, data: Any, on_error: Callable[[int, str], None] | None = None
    ) -> tuple[Any, list[Any]]:
        view = memoryview(data).cast("B")
        i, end = 0, len(view)
        metadata = None
        items: list[Any] = []
        index = 0
        while i < end:
            tag, i = _varint(view, i, end)
            if tag == (1 << 3 | 2):
                start, i = _length(view, i, end)
                metadata = self._message(meta, view, start, i)
            elif tag == (2 << 3 | 2):
                start, i = _length(view, i, end)
                try:
                    items.append(self._message(item, view, start, i))
                except ProtobufError as exc:
                    if on_error is None:
                        raise
                    on_error(index, str(exc))
                index += 1
            else:
                i = _skip(view, i, end, tag & 7)
        if metadata is None:
            metadata = self._message(meta, view, 0, 0)
        return metadata, items

    def _intern(self, s: str) -> str:
        return self.strings.setdefault(s, s)

    def _message(self, message: Message, view: memoryview, i: int, end: int) -> Any:
        slots = list(message.defaults)
        gathered: dict[int, list[Any]] = {}
        while i < end:
            start = i
            tag, i = _varint(view, i, end)
            number, wire = tag >> 3, tag & 7
            field = message.fields.get(number)
            if field is None:
                i = _skip(view, i, end, wire)
                continue
            slot, kind, _, flags = field
            if flags & SHARED:
                j = _skip(view, i, end, wire)
                while j < end and (flags & REPEATED or kind >= STRING_MAP):
                    next_tag, k = _varint(view, j, end)
                    if next_tag != tag:
                        break
                    j = _skip(view, k, end, wire)
                key = (message, bytes(view[start:j]))
                if key not in self.shared:
                    self.shared[key] = self._run(message, field, tag, view, start, j)
                slots[slot] = self.shared[key]
                i = j
                continue
            if kind >= STRING_MAP:
                if slots[slot] is message.defaults[slot]:
                    slots[slot] = {}
                i = self._entry(kind, wire, view, i, end, slots[slot])
                continue
            value, i = self._value(field, number, wire, view, i, end)
            if flags & REPEATED:
                gathered.setdefault(slot, []).append(value)
            elif kind > SHARED_STRING or value:
                slots[slot] = value
        for slot, _, _, flags in message.fields.values():
            if flags & REPEATED and not flags & SHARED and slot in gathered:
                slots[slot] = tuple(gathered[slot])
        if message.dedup:
            try:
                return self.equal.setdefault((message, tuple(slots)), message.build(*slots))
            except TypeError:
                return message.build(*slots)
        return message.build(*slots)

    def _run(
        self,
        message: Message,
        field: tuple[int, int, Message | None, int],
        tag: int,
        view: memoryview,
        i: int,
        end: int,
    ) -> Any:
        slot, kind, _, flags = field
        wire = tag & 7
        if kind >= STRING_MAP:
            entries: dict[str, str] = {}
            while i < end:
                i = _varint(view, i, end)[1]
                i = self._entry(kind, wire, view, i, end, entries)
            return entries
        values = []
        while i < end:
            i = _varint(view, i, end)[1]
            value, i = self._value(field, tag >> 3, wire, view, i, end)
            values.append(value)
        if flags & REPEATED:
            return tuple(values) if values else message.defaults[slot]
        return values[-1]

    def _value(
        self, field: tuple[int, int, Message | None, int], number: int, wire: int, view: memoryview, i: int, end: int
    ) -> tuple[Any, int]:
        _, kind, sub, _ = field
        if kind in (BOOL, INT):
            if wire != 0:
                raise ProtobufError(f"field {number}: wire type {wire}, expected a varint")
            raw, i = _varint(view, i, end)
            if kind == BOOL:
                return raw != 0, i
            return (raw - (1 << 64) if raw >= 1 << 63 else raw), i
        if wire != 2:
            raise ProtobufError(f"field {number}: wire type {wire}, expected length-delimited")
        start, stop = _length(view, i, end)
        value: Any
        if kind in (STRING, SHARED_STRING):
            value = bytes(view[start:stop]).decode("utf-8", "replace")
            if kind == SHARED_STRING:
                value = self._intern(value)
        elif kind == MESSAGE:
            assert sub is not None
            value = self._message(sub, view, start, stop)
        elif kind == TIME:
            value = self._time(view, start, stop)
        else:
            value = self._quantity(view, start, stop)
        return value, stop

    def _time(self, view: memoryview, i: int, end: int) -> str | None:
        if i == end:
            return None
        seconds = 0
        while i < end:
            tag, i = _varint(view, i, end)
            if tag == (1 << 3 | 0):
                raw, i = _varint(view, i, end)
                seconds = raw - (1 << 64) if raw >= 1 << 63 else raw
            else:
                i = _skip(view, i, end, tag & 7)
        when = _EPOCH + dt.timedelta(seconds=seconds)
        return self._intern(when.strftime("%Y-%m-%dT%H:%M:%SZ"))

    def _quantity(self, view: memoryview, i: int, end: int) -> str:
        value = ""
        while i < end:
            tag, i = _varint(view, i, end)
            if tag == (1 << 3 | 2):
                start, i = _length(view, i, end)
                value = self._intern(bytes(view[start:i]).decode("utf-8", "replace"))
            else:
                i = _skip(view, i, end, tag & 7)
        return value

    def _entry(self, kind: int, wire: int, view: memoryview, i: int, end: int, into: dict[str, str]) -> int:
        if wire != 2:
            raise ProtobufError(f"a map entry of wire type {wire}")
        i, stop = _length(view, i, end)
        key = value = ""
        while i < stop:
            tag, i = _varint(view, i, stop)
            if tag in (1 << 3 | 2, 2 << 3 | 2):
                start, i = _length(view, i, stop)
                if tag >> 3 == 1:
                    key = self._intern(bytes(view[start:i]).decode("utf-8", "replace"))
                elif kind == QUANTITY_MAP:
                    value = self._quantity(view, start, i)
                else:
                    value = self._intern(bytes(view[start:i]).decode("utf-8", "replace"))
            else:
                i = _skip(view, i, stop, tag & 7)
        into[key] = value
        return stop

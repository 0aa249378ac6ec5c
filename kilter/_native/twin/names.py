"""Reference twin of ``kilter._native.names``: the same answers from a dict."""

from __future__ import annotations

import json

import numpy as np
import numpy.typing as npt

NODE_NEEDLE = b'"Node":{"metadata":{"name":"'
NAME_HEAD = b'{"Name":"'


class NameIndex:
    def __init__(self, names: list[str]) -> None:
        self._index: dict[str, int] = {}
        for i, name in enumerate(names):
            if name in self._index:
                raise ValueError(f"duplicate name {name!r}")
            self._index[name] = i
        self.size = len(names)

    def lookup(self, names: list[str], out: npt.NDArray[np.int32]) -> int:
        if len(out) != len(names):
            raise ValueError("out must align with names")
        unknown = 0
        for i, name in enumerate(names):
            if not isinstance(name, str):
                raise TypeError(f"name {i} is {type(name).__name__}, not str")
            out[i] = self._index.get(name, -1)
            unknown += int(out[i] < 0)
        return unknown

    def lookup_json(self, data: bytes) -> tuple[npt.NDArray[np.int32], int] | None:
        if b"\\" in data:
            return None
        try:
            names = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(str(exc)) from None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError("expected a JSON array of node names")
        out = np.empty(len(names), dtype=np.int32)
        return out, self.lookup(names, out)

    def lookup_nodeinfos(self, data: bytes, start: int) -> tuple[npt.NDArray[np.int32], list[str]] | None:
        out, unknown, _, ok = self.scan_nodeinfos(data, start, floor=start, final=True)
        if not ok or not len(out):
            return None
        return out, unknown

    def scan_nodeinfos(
        self, data: bytes, start: int, *, floor: int, final: bool
    ) -> tuple[npt.NDArray[np.int32], list[str], int, bool]:
        if start < 0 or start > len(data):
            raise ValueError(f"start {start} is outside the {len(data)} bytes")
        if floor < 0 or floor > start:
            raise ValueError(f"floor {floor} is not between 0 and start {start}")
        failed: tuple[npt.NDArray[np.int32], list[str], int, bool] = (np.empty(0, dtype=np.int32), [], start, False)
        found: list[str] = []
        i = start
        while (at := data.find(NODE_NEEDLE, i)) >= 0:
            s = at + len(NODE_NEEDLE)
            e = data.find(b'"', s)
            raw = data[s:] if e < 0 else data[s:e]
            if b"\\" in raw or any(c < 0x20 for c in raw):
                return failed
            if e < 0:
                if final:
                    return failed
                i = at  # the name goes on in the next bytes
                break
            header = NAME_HEAD + raw + b'",'
            head = at - len(header)
            if head - 1 < floor or data[head - 1] not in b"[," or data[head:at] != header:
                return failed
            try:
                found.append(raw.decode())
            except UnicodeDecodeError:
                return failed
            i = e + 1
        else:
            i = len(data) if final else max(i, len(data) - (len(NODE_NEEDLE) - 1))
        out = np.array([self._index.get(name, -1) for name in found], dtype=np.int32)
        return out, [name for name, k in zip(found, out.tolist(), strict=True) if k < 0], i, True

    def index(self, name: str) -> int:
        return self._index.get(name, -1)

    def __len__(self) -> int:
        return self.size

"""Reference twin of ``kilter._native.names``: the same answers from a dict."""

from __future__ import annotations

import json

import numpy as np
import numpy.typing as npt


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

    def index(self, name: str) -> int:
        return self._index.get(name, -1)

    def __len__(self) -> int:
        return self.size

"""Pure-Python twin of ``_native.jsonout``: the same answers through the json module (tests only)."""

from __future__ import annotations

import json
from collections.abc import Sequence


class JsonNames:
    def __init__(self, names: list[str]) -> None:
        self.names = list(names)
        self.size = len(names)

    def _name(self, i: int) -> str:
        if not 0 <= i < self.size:
            raise IndexError(f"node index {i} outside 0..{self.size - 1}")
        return self.names[i]

    def name(self, i: int) -> bytes:
        return json.dumps(self._name(i), ensure_ascii=False).encode()

    def array(self, idx: Sequence[int]) -> bytes:
        return json.dumps([self._name(int(i)) for i in idx], ensure_ascii=False, separators=(",", ":")).encode()

    def object(self, idx: Sequence[int], value_of: Sequence[int], values: list[bytes]) -> bytes:
        if len(value_of) != len(idx):
            raise ValueError("value_of must align with idx")
        parts = [self.name(int(i)) + b":" + values[int(v)] for i, v in zip(idx, value_of, strict=True)]
        return b"{" + b",".join(parts) + b"}"

    def host_scores(self, idx: Sequence[int], scores: Sequence[int]) -> bytes:
        if len(scores) != len(idx):
            raise ValueError("scores must align with idx")
        hosts = [{"Host": self._name(int(i)), "Score": int(s)} for i, s in zip(idx, scores, strict=True)]
        return json.dumps(hosts, ensure_ascii=False, separators=(",", ":")).encode()

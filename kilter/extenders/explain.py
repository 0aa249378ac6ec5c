"""What the extender last decided about each pod, kept compact and rendered on request.

A filter over 5,000 nodes must not build 5,000 sentences on the hot path, so
a record keeps the arrays the decision used (node indices, verdict codes,
free and total GPUs, scores) and turns them into per-node lines only when
``/debug/explain`` asks.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["DecisionLog", "Record"]

Reason = Callable[[int, int, int], str]  # (verdict code, free GPUs, total GPUs) -> sentence


@dataclass
class Record:
    verb: str
    at: float
    summary: str
    names: Sequence[str]  # the nodes in request order, or (with ``index``) the fleet's names list, shared
    index: npt.NDArray[np.int32] | None = None
    codes: npt.NDArray[np.int8] | None = None
    free: npt.NDArray[np.int16] | None = None
    total: npt.NDArray[np.int16] | None = None
    scores: npt.NDArray[np.int8] | None = None
    reason: Reason | None = None
    verdicts: tuple[str, ...] = ()
    extra: dict[str, str] = field(default_factory=dict)

    def render(self) -> dict[str, Any]:
        nodes: list[dict[str, Any]] = []
        order = self.index.tolist() if self.index is not None else range(len(self.names))
        for i, at in enumerate(order):
            name = self.names[at]
            entry: dict[str, Any] = {"node": name}
            if self.codes is not None and self.reason is not None:
                code = int(self.codes[i])
                entry["verdict"] = self.verdicts[code]
                free = int(self.free[i]) if self.free is not None else 0
                total = int(self.total[i]) if self.total is not None else 0
                entry["reason"] = self.extra.get(name) or self.reason(code, free, total)
            if self.scores is not None:
                entry["score"] = int(self.scores[i])
            nodes.append(entry)
        return {
            "verb": self.verb,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.at)),
            "summary": self.summary,
            "nodes": nodes,
        }


class DecisionLog:
    """The last ``per_pod`` records per pod, at most ``records`` in all (least recently decided pods go first).

    A record over 5,000 nodes holds ~45 KB of arrays, so the default budget
    of 2,000 records stays under ~100 MB whatever the cluster size.
    """

    def __init__(self, *, records: int = 2_000, per_pod: int = 4) -> None:
        self.records = records
        self.per_pod = per_pod
        self._log: OrderedDict[str, deque[Record]] = OrderedDict()
        self._count = 0

    def add(self, namespace: str, name: str, record: Record) -> None:
        key = f"{namespace}/{name}"
        entries = self._log.get(key)
        if entries is None:
            entries = self._log[key] = deque(maxlen=self.per_pod)
        else:
            self._log.move_to_end(key)
        self._count += len(entries) < self.per_pod
        entries.append(record)
        while self._count > self.records and len(self._log) > 1:
            _, dropped = self._log.popitem(last=False)
            self._count -= len(dropped)

    def explain(self, namespace: str, name: str) -> list[dict[str, Any]] | None:
        entries = self._log.get(f"{namespace}/{name}")
        return None if entries is None else [r.render() for r in entries]

"""What the extender last decided about each pod, kept compact and bounded, and rendered on request.

A filter over 5,000 nodes must not build 5,000 sentences on the hot path, so
a record keeps the arrays the decision used (node indices, verdict codes,
free and total GPUs, scores) and turns them into per-node lines only when
``/debug/explain`` asks.

A request names whatever nodes its sender likes, so nothing here grows with
the request: a node kilter knows is kept as its index into the fleet's own
names list (shared by every record); of the nodes kilter does not know, the
first ``MAX_UNKNOWN_NAMES`` keep their names and the rest are only counted;
a record keeps at most ``MAX_ENTRIES`` nodes in all; and the log as a whole
keeps at most ``entries`` nodes across its records. What a record leaves
out is said in its rendered ``note``. Rendering is then bounded too: at most
``per_pod`` records of ``MAX_ENTRIES`` nodes for one pod.

Each record added is also a decision for ``WatchDecisions``: with a
``feed`` that someone watches, ``add`` publishes its verb, outcome and
summary (never the per-node arrays).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from kilter.gangs.decisions import Decision, DecisionFeed

__all__ = ["MAX_ENTRIES", "MAX_LOG_BYTES", "MAX_UNKNOWN_NAMES", "DecisionLog", "Record"]

Reason = Callable[[int, int, int], str]  # (verdict code, free GPUs, total GPUs) -> sentence

MAX_ENTRIES = 16_384
"""Nodes one record keeps: every node of a 16,384-node fleet (65,536 GPUs at four a node), ~200 KB of arrays."""

RECORD_OVERHEAD = 1_024
"""Bytes a record costs beyond its arrays, names and texts (the objects holding them), for the byte budget."""

MAX_LOG_BYTES = 256 * 1024**2
"""The log's default byte budget: the node budget's arrays (~50 MB) and names at their longest (253 bytes, 100 a
record, 2,000 records: ~50 MB) with room to spare; requests cannot push the process past it, whatever they hold."""

MAX_UNKNOWN_NAMES = 100
"""Names kept per record of nodes kilter does not know (the rest are counted): enough to spot a typo or a
misconfigured node pool, without keeping a list a client can make as long as the body limit allows."""


@dataclass
class Record:
    """One decision: per node (in request order) its verdict, free and total GPUs, score.

    ``names`` with ``index`` is the fleet's names list (shared, not copied)
    and each node's index into it, -1 for a node kilter does not know; the
    caller passes the names as sent (``sent``, aligned with ``index``) when
    some are unknown, and ``bounded()`` keeps only the unknown ones it keeps
    (``unknown``: position -> name). Without ``index``, ``names`` are the
    nodes themselves. ``DecisionLog.add`` keeps only ``bounded()`` records.
    """

    verb: str
    at: float
    summary: str
    names: Sequence[str]
    index: npt.NDArray[np.int32] | None = None
    codes: npt.NDArray[np.int8] | None = None
    free: npt.NDArray[np.int16] | None = None
    total: npt.NDArray[np.int16] | None = None
    scores: npt.NDArray[np.int8] | None = None
    reason: Reason | None = None
    verdicts: tuple[str, ...] = ()
    extra: dict[str, str] = field(default_factory=dict)
    sent: Sequence[str] = ()  # with ``index``: the names as sent, aligned with it (until bounded)
    unknown: dict[int, str] = field(default_factory=dict)  # position -> name of each unknown node kept
    left_out_unknown: int = 0  # nodes kilter does not know, counted but not kept
    left_out: int = 0  # further nodes past MAX_ENTRIES, counted but not kept
    outcome: str = ""  # the verb's short answer ("fits", "no-fit", "gang", "scored", "kept"): what a watcher sees

    @property
    def size(self) -> int:
        """Nodes this record keeps: its share of the log's ``entries`` budget."""
        return len(self.index) if self.index is not None else len(self.names)

    @property
    def nbytes(self) -> int:
        """What this record holds, about, in bytes: its arrays, the names and texts it keeps itself (not the
        fleet's shared names list). Its share of the log's ``max_bytes``."""
        arrays = sum(a.nbytes for a in (self.index, self.codes, self.free, self.total, self.scores) if a is not None)
        names = sum(map(len, self.unknown.values())) + (sum(map(len, self.names)) if self.index is None else 0)
        texts = len(self.summary) + sum(len(k) + len(v) for k, v in self.extra.items())
        return RECORD_OVERHEAD + arrays + names + texts + 64 * len(self.unknown)

    def bounded(self) -> Record:
        """This record keeping at most ``MAX_UNKNOWN_NAMES`` unknown nodes and ``MAX_ENTRIES`` nodes in all."""
        if self.index is None:
            if len(self.names) <= MAX_ENTRIES:
                return self
            kept_names = list(self.names[:MAX_ENTRIES])
            extra = {n: self.extra[n] for n in kept_names if n in self.extra}
            cut = self._take(np.arange(MAX_ENTRIES))
            return replace(cut, names=kept_names, extra=extra, left_out=len(self.names) - MAX_ENTRIES)
        unknown = np.flatnonzero(self.index < 0)
        keep = self.index >= 0
        keep[unknown[:MAX_UNKNOWN_NAMES]] = True
        candidates = np.flatnonzero(keep)
        kept = candidates[:MAX_ENTRIES]
        cut = self._take(kept) if len(kept) < len(self.index) else self
        assert cut.index is not None
        at = np.flatnonzero(cut.index < 0)
        sent = self.sent if len(self.sent) else None
        names = {j: sent[i] for j, i in zip(at.tolist(), kept[at].tolist(), strict=True)} if sent is not None else {}
        return replace(
            cut,
            sent=(),
            unknown=names,
            left_out_unknown=len(unknown) - min(len(unknown), MAX_UNKNOWN_NAMES),
            left_out=len(candidates) - len(kept),
        )

    def _take(self, at: npt.NDArray[np.intp]) -> Record:
        def part(a: Any) -> Any:
            return None if a is None else a[at]  # fancy indexing copies: the request's arrays are not kept

        return replace(
            self,
            index=part(self.index),
            codes=part(self.codes),
            free=part(self.free),
            total=part(self.total),
            scores=part(self.scores),
        )

    def render(self) -> dict[str, Any]:
        n = self.size
        order = self.index.tolist() if self.index is not None else range(n)
        zeros = [0] * n
        codes = self.codes.tolist() if self.codes is not None and self.reason is not None else None
        free = self.free.tolist() if self.free is not None else zeros
        total = self.total.tolist() if self.total is not None else zeros
        scores = self.scores.tolist() if self.scores is not None else None
        nodes: list[dict[str, Any]] = []
        for i, at in enumerate(order):
            name = self.names[at] if at >= 0 else self.unknown.get(i) or (self.sent[i] if self.sent else "?")
            entry: dict[str, Any] = {"node": name}
            if codes is not None and self.reason is not None:
                code = codes[i]
                entry["verdict"] = self.verdicts[code]
                entry["reason"] = self.extra.get(name) or self.reason(code, free[i], total[i])
            if scores is not None:
                entry["score"] = scores[i]
            nodes.append(entry)
        rendered: dict[str, Any] = {
            "verb": self.verb,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.at)),
            "summary": self.summary,
            "nodes": nodes,
        }
        note = self.note()
        if note:
            rendered["note"] = note
        return rendered

    def note(self) -> str:
        """What this record left out, in words ("" when it kept every node)."""
        parts = []
        if self.left_out_unknown:
            parts.append(
                f"{self.left_out_unknown:,} more nodes kilter does not know were not kept "
                f"(only the first {MAX_UNKNOWN_NAMES:,} are)"
            )
        if self.left_out:
            parts.append(f"{self.left_out:,} more nodes past the first {MAX_ENTRIES:,} were not kept")
        return "; ".join(parts)


class DecisionLog:
    """The last ``per_pod`` records per pod, at most ``records`` in all, ``entries`` nodes and about ``max_bytes``
    bytes across them.

    The least recently decided pods go first. A record holds at most
    ``MAX_ENTRIES`` nodes at ~13 bytes each (index, verdict, free, total,
    score), so the default budget of 4,000,000 nodes keeps the arrays near
    50 MB whatever the requests hold; unknown nodes' names add at most
    ``MAX_UNKNOWN_NAMES`` strings a record.
    """

    def __init__(
        self,
        *,
        records: int = 2_000,
        per_pod: int = 4,
        entries: int = 4_000_000,
        max_bytes: int = MAX_LOG_BYTES,
        feed: DecisionFeed | None = None,
    ) -> None:
        self.feed = feed  # told of each record added (``WatchDecisions``), when someone watches
        self.records = records
        self.per_pod = per_pod
        self.entries = entries
        self.max_bytes = max_bytes
        self._log: OrderedDict[str, deque[Record]] = OrderedDict()
        self._count = 0
        self._size = 0
        self._bytes = 0

    @property
    def nbytes(self) -> int:
        """What the records hold, about, in bytes (what ``max_bytes`` bounds)."""
        return self._bytes

    @property
    def size(self) -> int:
        """Nodes kept across all records (what ``entries`` bounds)."""
        return self._size

    @property
    def names_kept(self) -> int:
        """Node names the records hold themselves (not counting the fleet's shared names list)."""
        return sum(len(r.unknown) + (len(r.names) if r.index is None else 0) for e in self._log.values() for r in e)

    def add(self, namespace: str, name: str, record: Record) -> None:
        feed = self.feed
        if feed is not None and feed.watched:
            decision = Decision(
                record.at, "scheduler", record.verb, "pod", namespace, name, record.outcome, record.summary
            )
            feed.publish(decision)
        record = record.bounded()
        key = f"{namespace}/{name}"
        entries = self._log.get(key)
        if entries is None:
            entries = self._log[key] = deque()
        else:
            self._log.move_to_end(key)
        while entries and len(entries) >= self.per_pod:  # ``>=``: per_pod may have been lowered (a reload)
            self._forget(entries.popleft(), len(key))
        entries.append(record)
        self._count += 1
        self._size += record.size
        self._bytes += record.nbytes + len(key)
        while self._over() and len(self._log) > 1:
            dropped_key, dropped = self._log.popitem(last=False)
            for r in dropped:
                self._forget(r, len(dropped_key))

    def _over(self) -> bool:
        return self._count > self.records or self._size > self.entries or self._bytes > self.max_bytes

    def _forget(self, record: Record, key_bytes: int) -> None:
        self._count -= 1
        self._size -= record.size
        self._bytes -= record.nbytes + key_bytes

    def explain(self, namespace: str, name: str) -> list[dict[str, Any]] | None:
        entries = self._log.get(f"{namespace}/{name}")
        return None if entries is None else [r.render() for r in entries]

"""What-ifs on the quota tree: book or release usage, then undo exactly.

``add_usage`` and ``remove_usage`` are exact inverses for a fixed tree (the
part pushed to a parent on the way in is the part pulled back on the way
out), so undoing a journal in reverse restores every node's usage without
copying the tree — the same idea as Kueue's ``SimulateUsageAddition``
returning a revert closure.
"""

from __future__ import annotations

from collections.abc import Mapping

from kilter.quota.available import add_usage, remove_usage
from kilter.quota.tree import FR, QuotaNode

__all__ = ["Journal"]


class Journal:
    def __init__(self) -> None:
        self._log: list[tuple[QuotaNode, Mapping[FR, int], int]] = []

    def __len__(self) -> int:
        return len(self._log)

    def add(self, node: QuotaNode, usage: Mapping[FR, int]) -> None:
        for fr, v in usage.items():
            add_usage(node, fr, v)
        self._log.append((node, usage, +1))

    def remove(self, node: QuotaNode, usage: Mapping[FR, int]) -> None:
        for fr, v in usage.items():
            remove_usage(node, fr, v)
        self._log.append((node, usage, -1))

    def undo(self, mark: int = 0) -> None:
        """Revert every change after ``mark`` (a length this journal had), newest first."""
        while len(self._log) > mark:
            node, usage, sign = self._log.pop()
            for fr, v in usage.items():
                (remove_usage if sign > 0 else add_usage)(node, fr, v)

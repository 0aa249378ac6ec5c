"""Who is told of changes to objects of a kind: the store's one hook for state kept beside it, fed incrementally.

Some views of the state are cheaper kept up to date one change at a time
than rebuilt from every object: the runtimes learned from finished Kueue
Workloads (``kilter.gangs.learned``) follow each Workload that finishes,
from a cold start's first list and from every watch event after. The store
tells each watcher of every change it applies, after it holds the new object;
the watchers run on the feeding thread (the event loop), so they must be
quick and must not raise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kilter.state.events import Stored

__all__ = ["KindWatchers", "Watcher"]

Watcher = Callable[[Stored | None, Stored | None], None]
"""Told of one object's change: ``(old, new)``; None when it did not exist before, or no longer does."""


class KindWatchers:
    """Watchers per (API group, kind)."""

    def __init__(self) -> None:
        self._by_kind: dict[tuple[str, str], list[Watcher]] = {}

    def add(self, group: str, kind: str, watcher: Watcher) -> None:
        """Tell ``watcher`` of every later change to an object of this kind."""
        self._by_kind.setdefault((group, kind), []).append(watcher)

    def changed(self, kind: tuple[str, str], old: Stored | None, new: Stored | None) -> None:
        for watcher in self._by_kind.get(kind, ()):
            watcher(old, new)

    def added(self, kind: tuple[str, str], objects: Iterable[Stored]) -> None:
        """A kind's first list: every object is new."""
        watchers = self._by_kind.get(kind)
        if watchers:
            for obj in objects:
                for watcher in watchers:
                    watcher(None, obj)

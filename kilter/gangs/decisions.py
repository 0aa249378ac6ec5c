"""A bounded publish/subscribe feed of placement and quota decisions, as they are made (gRPC ``WatchDecisions``).

Publishers are the places that decide: the extender's verbs (through its
``DecisionLog``), Volcano's verbs (through their notes), the bind, and the
AdmissionCheck controller. Publishing must cost the hot path nothing when
nobody listens, so a publisher asks ``watched`` before it builds a
``Decision``, and ``publish`` itself is O(subscribers): an append to each
matching subscriber's queue, no encoding (the subscriber encodes what it
reads, on its own time).

A subscriber that falls behind is never allowed to hold memory without
bound nor to slow the publisher: its queue keeps at most ``limit``
decisions, and what arrives while it is full is counted, not kept. The
reader then sees, exactly where the gap was, one ``Dropped`` marker with
the number it missed, and the stream goes on — a dashboard recovers by
itself and a client that needs every decision knows it must re-read state.
(Ending the stream with RESOURCE_EXHAUSTED instead would make every slow
client reconnect and miss more.)

Everything runs on the server's one event-loop thread, as every verb does:
``publish`` wakes a reader with a plain ``asyncio.Event``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

__all__ = ["DEFAULT_LIMIT", "Decision", "DecisionFeed", "Dropped", "Subscription"]

DEFAULT_LIMIT = 10_000
"""Decisions one subscriber may have unread: two seconds of a 5,000-decisions-a-second burst, a few MB."""


@dataclass(frozen=True, slots=True)
class Decision:
    """One decision: who made it about what, and what it was, in one line.

    ``source`` is the component (``scheduler``, ``volcano``,
    ``admission-check``), ``verb`` what it was asked (``filter``, ``bind``,
    Volcano's ``enqueue``, ``allocate`` ...), ``kind``/``namespace``/``name``
    the object (``pod``, ``podgroup``, ``queue`` — cluster-scoped, empty
    namespace — or ``workload``), ``outcome`` a short label (``fits``,
    ``no-fit``, ``bound``, ``Ready`` ...; "" where the verb has none) and
    ``message`` the reason as the explain views show it. ``at`` is Unix
    seconds; ``node`` the node a bind chose ("" otherwise).
    """

    at: float
    source: str
    verb: str
    kind: str
    namespace: str
    name: str
    outcome: str
    message: str
    node: str = ""


@dataclass(frozen=True, slots=True)
class Dropped:
    """``count`` decisions this subscriber missed here because its queue was full."""

    count: int


class Subscription:
    """One reader's queue: decisions of ``namespace`` ("" for every namespace and cluster-scoped ones), in order."""

    def __init__(self, feed: DecisionFeed, namespace: str, limit: int) -> None:
        self.namespace = namespace
        self.limit = limit
        self.dropped = 0  # missed in all, since it subscribed
        self._feed = feed
        self._queue: deque[Decision | Dropped] = deque()
        self._kept = 0  # decisions (not markers) in the queue
        self._gap = 0  # missed since the last decision kept
        self._wake = asyncio.Event()
        self.closed = False

    def offer(self, decision: Decision) -> None:
        if self._kept >= self.limit:
            self._gap += 1
            self.dropped += 1
            return
        if self._gap:
            self._queue.append(Dropped(self._gap))
            self._gap = 0
        self._queue.append(decision)
        self._kept += 1
        self._wake.set()

    def take(self) -> Decision | Dropped | None:
        """The next item without waiting (None: nothing yet)."""
        if self._queue:
            item = self._queue.popleft()
            if isinstance(item, Decision):
                self._kept -= 1
            return item
        if self._gap:
            gap, self._gap = self._gap, 0
            return Dropped(gap)
        return None

    async def next(self) -> Decision | Dropped:
        """The next item, waiting for one."""
        while True:
            item = self.take()
            if item is not None:
                return item
            self._wake.clear()
            await self._wake.wait()

    def close(self) -> None:
        """Stop receiving (the stream ended); idempotent."""
        if not self.closed:
            self.closed = True
            self._feed.unsubscribe(self)


class DecisionFeed:
    """The decisions of one server process, fanned out to its subscribers (see the module docstring)."""

    def __init__(self, *, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self.published = 0  # decisions published while someone listened
        self._subscribers: list[Subscription] = []

    @property
    def watched(self) -> bool:
        """Someone listens: only then is a decision worth building."""
        return bool(self._subscribers)

    def publish(self, decision: Decision) -> None:
        if not self._subscribers:
            return
        self.published += 1
        for sub in self._subscribers:
            if not sub.namespace or sub.namespace == decision.namespace:
                sub.offer(decision)

    def subscribe(self, namespace: str = "", *, limit: int | None = None) -> Subscription:
        sub = Subscription(self, namespace, self.limit if limit is None else limit)
        self._subscribers = [*self._subscribers, sub]
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subscribers = [s for s in self._subscribers if s is not sub]

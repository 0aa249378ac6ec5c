"""What kilter last decided about each Volcano job and queue, for ``GET /debug/volcano``.

Volcano's answers carry a status and no reason, so the reasons are kept
here, the latest per job (``namespace/podgroup``, or ``queue/NAME``) and per
kind of decision (``enqueue``, ``plan``, ``allocate`` ...). The oldest job's
notes go first once ``MAX_NOTES`` jobs are noted, so the memory is bounded
whatever the cluster's churn. With a ``feed`` someone watches, each note is
also published as a decision (``WatchDecisions``): a job's as its PodGroup's,
a queue's as the cluster-scoped queue's.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from kilter.gangs.decisions import Decision, DecisionFeed

__all__ = ["MAX_NOTES", "MAX_NOTES_BYTES", "MAX_NOTE_TEXT", "Notes", "cut"]

MAX_NOTES = 10_000  # jobs (and queues) whose notes are kept
MAX_NOTE_TEXT = 2_000
"""Characters one note keeps: a reason names a few nodes and domains; past this it is cut, saying by how much."""
MAX_NOTES_BYTES = 64 * 1024**2
"""The notes' byte budget: 10,000 jobs of a few notes of a few hundred bytes with room to spare, so that however
long the texts or names a caller sends, the oldest jobs' notes go first before memory does."""
_KEY = 63 + 1 + 253  # "namespace/podgroup" at its longest; "queue/NAME" is shorter


def cut(text: str, limit: int) -> str:
    """``text`` at most about ``limit`` characters, saying how many were cut."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit:,} characters cut)"


class Notes(OrderedDict[str, dict[str, str]]):
    """Job key -> decision kind -> its reason, the most recently noted job last."""

    feed: DecisionFeed | None = None
    nbytes: int = 0  # the keys' and texts' lengths, what ``MAX_NOTES_BYTES`` bounds

    def add(self, job: str, what: str, text: str) -> None:
        # The wire types refuse names no object can have; this keeps the budget whatever reaches here.
        job, what, text = cut(job, _KEY), cut(what, 64), cut(text, MAX_NOTE_TEXT)
        feed = self.feed
        if feed is not None and feed.watched:
            namespace, _, name = job.partition("/")
            kind = "queue" if namespace == "queue" else "podgroup"
            feed.publish(
                Decision(time.time(), "volcano", what, kind, "" if kind == "queue" else namespace, name, "", text)
            )
        notes = self.get(job)
        if notes is None:
            notes = self[job] = {}
            self.nbytes += len(job)
        old = notes.get(what)
        self.nbytes += len(text) + (len(what) if old is None else -len(old))
        notes[what] = text
        self.move_to_end(job)
        while (len(self) > MAX_NOTES or self.nbytes > MAX_NOTES_BYTES) and len(self) > 1:
            dropped, kept = self.popitem(last=False)
            self.nbytes -= len(dropped) + sum(len(k) + len(v) for k, v in kept.items())

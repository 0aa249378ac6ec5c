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

__all__ = ["MAX_NOTES", "Notes"]

MAX_NOTES = 10_000  # jobs (and queues) whose notes are kept


class Notes(OrderedDict[str, dict[str, str]]):
    """Job key -> decision kind -> its reason, the most recently noted job last."""

    feed: DecisionFeed | None = None

    def add(self, job: str, what: str, text: str) -> None:
        feed = self.feed
        if feed is not None and feed.watched:
            namespace, _, name = job.partition("/")
            kind = "queue" if namespace == "queue" else "podgroup"
            feed.publish(
                Decision(time.time(), "volcano", what, kind, "" if kind == "queue" else namespace, name, "", text)
            )
        notes = self.setdefault(job, {})
        notes[what] = text
        self.move_to_end(job)
        while len(self) > MAX_NOTES:
            self.popitem(last=False)

"""What kilter last decided about each Volcano job and queue, for ``GET /debug/volcano``.

Volcano's answers carry a status and no reason, so the reasons are kept
here, the latest per job (``namespace/podgroup``, or ``queue/NAME``) and per
kind of decision (``enqueue``, ``plan``, ``allocate`` ...). The oldest job's
notes go first once ``MAX_NOTES`` jobs are noted, so the memory is bounded
whatever the cluster's churn.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["MAX_NOTES", "Notes"]

MAX_NOTES = 10_000  # jobs (and queues) whose notes are kept


class Notes(OrderedDict[str, dict[str, str]]):
    """Job key -> decision kind -> its reason, the most recently noted job last."""

    def add(self, job: str, what: str, text: str) -> None:
        notes = self.setdefault(job, {})
        notes[what] = text
        self.move_to_end(job)
        while len(self) > MAX_NOTES:
            self.popitem(last=False)

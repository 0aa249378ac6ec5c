"""One Volcano scheduling session as kilter keeps it: its jobs and queues, its serial, what it placed and permitted.

Volcano opens a session every scheduling cycle (``onSessionOpen``, with every
job and queue it knows, fresher than kilter's watch of the cluster) and
closes it at the cycle's end. While one is open its jobs and queues are what
the quota verbs decide on, and its serial tells the caches keyed by session
apart (0: no session). Two things last longer than a body:

- ``placed``: the tasks allocated in this session (task uid -> job, asks in
  canonical units, node). They count in the quota view until the session
  closes or the next one opens, whose jobs already hold what was kept.
- ``permitted``: the jobs kilter let Volcano enqueue. They stay charged until
  a session shows them gone or past Pending (then their pods hold the quota).

A body kilter cannot read loses the session (``lost``): the cluster state is
the view until the next one opens.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from kilter.extenders.volcano import wire as vw
from kilter.quota.bound_jobs import BoundJob

__all__ = ["Placed", "Session", "Sessions"]


class Placed(NamedTuple):
    """A task allocated in the session: its job key, what it asks (canonical units) and its node."""

    job: str
    asks: dict[str, int]
    node: str


@dataclass(frozen=True)
class Session:
    """One onSessionOpen body as kilter reads it: jobs by ``namespace/name``, queues by name."""

    jobs: dict[str, vw.JobInfo]
    queues: dict[str, vw.QueueInfo]
    serial: int  # 1 for the first session since start, +1 for each one opened after it


class Sessions:
    """The open session (if any) and what lasts beside it; methods run on the server's event-loop thread."""

    def __init__(self) -> None:
        self.current: Session | None = None
        self.opened = 0  # sessions opened since start: the serial of the last one
        self.placed: dict[str, Placed] = {}  # task uid -> its allocation, this session
        self.permitted: dict[str, BoundJob] = {}  # job key -> the job kilter let Volcano enqueue

    @property
    def serial(self) -> int:
        """The open session's serial, 0 when none is open."""
        return self.current.serial if self.current is not None else 0

    def open(self, args: vw.SessionOpenArgs) -> Session:
        """Start a session from its body; forget the permits of jobs it shows gone or no longer Pending."""
        self.opened += 1
        jobs = {f"{j.namespace}/{j.name}": j for j in (args.jobs or {}).values()}
        queues = {q.name: q for q in (args.queues or {}).values() if q.name}
        self.current = Session(jobs, queues, self.opened)
        self.placed.clear()  # the new session's jobs already count what the last one allocated and kept
        for key in list(self.permitted):
            info = jobs.get(key)
            group = info.pod_group.normalized() if info is not None and info.pod_group is not None else None
            if info is None or (group is not None and group.status.phase != "Pending"):
                del self.permitted[key]
        return self.current

    def lost(self) -> None:
        """A session kilter could not read: the cluster state is the view until the next one."""
        self.current = None

    def close(self) -> None:
        self.current = None
        self.placed.clear()

    def job(self, key: str) -> vw.JobInfo | None:
        """The open session's job ``namespace/name``, None without a session or when it does not hold it."""
        return self.current.jobs.get(key) if self.current is not None else None

    def queues(self) -> Iterable[vw.QueueInfo]:
        return self.current.queues.values() if self.current is not None else ()

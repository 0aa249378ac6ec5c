"""How long a queue has been: the time-weighted mean number of jobs waiting for GPUs over a recent window.

A split gang burns its extra GPU-seconds over its whole run, not at the
instant it starts, so what it costs the others depends on whether jobs
will be waiting while it runs. No cluster knows that; the best forecast it
has is the recent past over a horizon as long as the gang's own expected
run (persistence), which is what ``mean`` answers. One instant's queue is a
poor forecast on a busy fleet: the moment a few gangs end, nothing waits
and every GPU seems free, then the next arrivals queue again behind the
split that took the fragments.

Every path observes the same thing, the count of jobs waiting (the
simulator at each of its events, a server at each change of the pending
Workloads it watches), so they price a split alike.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable

from kilter.model.errors import InputError

__all__ = ["Backlog"]


class Backlog:
    """The waiting-job count as a step function of time, kept for ``horizon_s``; ``mean`` over a window of it."""

    def __init__(self, horizon_s: float) -> None:
        if not math.isfinite(horizon_s) or horizon_s <= 0:
            raise InputError(f"a backlog's horizon must be a finite number of seconds above 0, not {horizon_s}")
        self.horizon_s = horizon_s
        self._times: list[float] = []
        self._area: list[float] = []  # job-seconds waited from the first record to each record's time
        self._counts: list[int] = []
        self._means: dict[tuple[float, float], float] = {}  # asked since the last observation (many gangs ask alike)

    def observe(self, now_s: float, waiting: int) -> None:
        """From ``now_s`` on, ``waiting`` jobs wait (times never go back; a repeat of the last count adds nothing)."""
        if waiting < 0 or not math.isfinite(now_s):
            raise InputError(f"a backlog observes a count >= 0 at a finite time, not {waiting} at {now_s}")
        times = self._times
        self._means.clear()
        if times:
            if now_s < times[-1]:
                raise InputError(f"a backlog's time goes forward: {now_s} after {times[-1]}")
            if self._counts[-1] == waiting:
                return
            area = self._area[-1] + self._counts[-1] * (now_s - times[-1])
            if now_s == times[-1]:
                self._counts[-1] = waiting
                return
        else:
            area = 0.0
        times.append(now_s)
        self._area.append(area)
        self._counts.append(waiting)
        if len(times) > 64 and times[len(times) // 2] < now_s - self.horizon_s:
            self._forget(now_s - self.horizon_s)

    def mean(self, now_s: float, window_s: float) -> float:
        """The mean number of jobs waiting over ``[now_s - window_s, now_s]`` (window capped at the horizon); before
        the first observation nothing waited."""
        times = self._times
        if not times or window_s <= 0:
            return float(self._counts[-1]) if times and window_s <= 0 else 0.0
        window = min(window_s, self.horizon_s)
        found = self._means.get((now_s, window))
        if found is None:
            found = self._means[(now_s, window)] = (self._integral(now_s) - self._integral(now_s - window)) / window
        return found

    @classmethod
    def of_spans(cls, spans: Iterable[tuple[float, float | None]], *, horizon_s: float) -> Backlog:
        """The backlog of jobs each waiting over one span (start, end; None: still waiting): what a server reads
        off its objects (a Workload waits from its creation to its quota reservation), so every replica and a
        restarted one price alike, with nothing kept."""
        events: list[tuple[float, int]] = []
        for start, end in spans:
            if not math.isfinite(start) or (end is not None and not end > start):
                continue  # no wait at all, or a span that does not read
            events.append((start, 1))
            if end is not None:
                events.append((end, -1))
        backlog = cls(horizon_s)
        waiting = 0
        for t, step in sorted(events, key=lambda e: (e[0], -e[1])):
            waiting += step
            backlog.observe(t, waiting)
        return backlog

    def mean_of_others(
        self, now_s: float, window_s: float, waiting_since_s: float, waited_until_s: float | None = None
    ) -> float:
        """``mean`` less the asker's own share of it, a job counted as waiting from ``waiting_since_s`` to
        ``waited_until_s`` (None: now): what waited besides it (never below 0)."""
        window = min(window_s, self.horizon_s)
        if window <= 0:
            return max(self.mean(now_s, window_s) - 1.0, 0.0)
        until = now_s if waited_until_s is None else min(waited_until_s, now_s)
        own = max(until - max(waiting_since_s, now_s - window), 0.0) / window
        return max(self.mean(now_s, window_s) - own, 0.0)

    def _integral(self, t: float) -> float:
        """Job-seconds waited from the first record to ``t`` (0 before it)."""
        i = bisect.bisect_right(self._times, t) - 1
        if i < 0:
            return 0.0
        return self._area[i] + self._counts[i] * (t - self._times[i])

    def _forget(self, before_s: float) -> None:
        """Drop records wholly before ``before_s``; the one in force at it stays, so means over the horizon hold."""
        i = bisect.bisect_right(self._times, before_s) - 1
        if i > 0:
            del self._times[:i], self._area[:i], self._counts[:i]

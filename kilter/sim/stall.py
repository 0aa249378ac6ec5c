"""When a simulated run has stalled: its clock is past any schedule that makes progress.

A run ends when every job has ended; a gang held for a room that never
comes would keep it going for ever, its clock stepping from one node
failure to the next or jumping to infinity. The bound is loose on
purpose (every job run end to end after the last arrival, ten times over,
plus a month of repairs): no honest schedule comes near it, and a bug
becomes an error naming what waits instead of a run that never ends.
"""

from __future__ import annotations

from collections.abc import Sequence

from kilter.sim.trace import TraceJob

__all__ = ["STALL_RUNS", "STALL_SLACK_S", "Stalled", "stalled_after_s"]

STALL_RUNS = 10.0
STALL_SLACK_S = 30 * 86400.0


class Stalled(RuntimeError):
    """The run's clock went past ``stalled_after_s``: gangs wait for something that never comes (a bug)."""


def stalled_after_s(jobs: Sequence[TraceJob]) -> float:
    """The simulated second past which a run of ``jobs`` (in submit order) has stalled."""
    last = jobs[-1].submit_s if jobs else 0.0
    return last + STALL_RUNS * sum(j.duration_s for j in jobs) + STALL_SLACK_S

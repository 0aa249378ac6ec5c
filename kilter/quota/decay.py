"""Time-decayed usage for fair share (``kilter.dev/usage-half-life``).

Kueue's share only sees what a queue borrows right now. With a half-life,
kilter also charges a queue for what it used recently, as Slurm's fair tree
does: the share is computed from ``max(current usage, decayed usage)`` per
flavor/resource, where decayed usage is an exponentially weighted average of
past usage, ``D(t) = D(t0)·a + U·(1 − a)`` with ``a = 0.5^((t − t0)/half-life)``
(the same exact law Kueue's admission fair sharing uses for LocalQueues).

The state (``D`` and ``t0``) is persisted in the ``kilter.dev/decayed-usage``
annotation of the ClusterQueue or Cohort; without it, decayed usage starts
at the current usage, which is all that can be derived from a snapshot.
The clock is always passed in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime

from kilter.quota.policy import DecayState
from kilter.quota.tree import FR

__all__ = ["advance", "effective_usage", "to_annotation"]


def advance(state: DecayState | None, usage: Mapping[FR, int], *, now: float, half_life_s: float) -> DecayState:
    """The decay state at ``now``, assuming ``usage`` held since the state's time."""
    if state is None:
        return DecayState(now, {fr: float(v) for fr, v in usage.items() if v})
    dt = max(0.0, now - state.time)
    keep = 0.5 ** (dt / half_life_s)
    frs = set(state.usage) | set(usage)
    return DecayState(
        max(now, state.time),
        {fr: state.usage.get(fr, 0.0) * keep + usage.get(fr, 0) * (1.0 - keep) for fr in sorted(frs)},
    )


def effective_usage(usage: Mapping[FR, int], state: DecayState) -> dict[FR, int]:
    """Per flavor/resource, the larger of current and decayed usage (rounded to whole units)."""
    frs = set(usage) | set(state.usage)
    return {fr: max(usage.get(fr, 0), round(state.usage.get(fr, 0.0))) for fr in frs}


def to_annotation(state: DecayState) -> str:
    """The ``kilter.dev/decayed-usage`` value that persists ``state``."""
    when = datetime.fromtimestamp(state.time, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    usage = {f"{f}/{r}": round(v, 3) for (f, r), v in sorted(state.usage.items())}
    return json.dumps({"time": when, "usage": usage}, separators=(",", ":"), sort_keys=True)

"""The picture of a comparison: GPU utilization over time per policy, and each queue's share of the fleet.

Drawn with matplotlib's Agg backend (no display needed) into a PNG. The
queue panel shows the first policy of the comparison, normally kilter.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kilter.sim.engine import Simulation

__all__ = ["plot_runs"]

DAY = 86_400.0


def _smooth(values: np.ndarray, width: int) -> np.ndarray:
    if width <= 1 or len(values) < width:
        return values
    kernel = np.ones(width) / width
    return np.convolve(values, kernel, mode="same")


def plot_runs(runs: Sequence[tuple[str, Simulation]], path: Path, *, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7), sharex=True, constrained_layout=True)
    span = max((r.timeline.times[-1] if r.timeline.times else 0.0) for _, r in runs) or 1.0
    unit, scale = ("days", DAY) if span > 2 * DAY else ("hours", 3600.0)
    for name, sim in runs:
        tl = sim.timeline
        if not tl.times:
            continue
        usable = max(int(sim.fleet.bitmap.domain_usable_gpus.sum()), 1)
        t = np.asarray(tl.times) / scale
        used = np.asarray(tl.used, dtype=np.float64) / usable
        top.plot(t, _smooth(used, 9) * 100, label=name, linewidth=1.2)
    top.set_ylabel("GPUs busy (% of usable)")
    top.set_ylim(0, 105)
    top.legend(loc="lower right", ncols=min(len(runs), 5), fontsize=8)
    top.set_title(title)
    name, sim = runs[0]
    tl = sim.timeline
    if tl.times:
        usable = max(int(sim.fleet.bitmap.domain_usable_gpus.sum()), 1)
        shares = np.asarray(tl.queue_used, dtype=np.float64).T / usable * 100
        bottom.stackplot(np.asarray(tl.times) / scale, *[_smooth(s, 9) for s in shares], labels=sim.cq_names)
        if len(sim.cq_names) <= 12:
            bottom.legend(loc="upper left", fontsize=7, ncols=min(len(sim.cq_names), 6))
    bottom.set_ylabel(f"share of GPUs per queue (%), {name}")
    bottom.set_xlabel(f"time ({unit})")
    bottom.set_ylim(0, 105)
    fig.savefig(path, dpi=110)
    plt.close(fig)

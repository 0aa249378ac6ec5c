"""The picture of a comparison: each policy's mean wait by job class, jobs waiting over time, each queue's share.

Drawn with matplotlib's Agg backend (no display needed) into a PNG. The
first panel sets the policies' mean waits side by side for jobs one
scale-up domain holds and for the rest, the two figures a mean over all jobs
hides; the queue panel shows the first policy of the comparison, normally
kilter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kilter.sim.engine import Simulation
from kilter.sim.run_settings import Timeline

__all__ = ["Drawn", "plot_runs"]

DAY = 86_400.0
CLASS_LABELS = (("oneDomain", "jobs one scale-up domain holds"), ("multiDomain", "jobs that need several"))


@dataclass(frozen=True)
class Drawn:
    """What the picture needs of one policy's run: small and picklable, so a run made in another process (``kilter
    demo`` runs its baselines beside kilter) is drawn like one made here."""

    timeline: Timeline
    usable_gpus: int
    cq_names: tuple[str, ...]
    classes: dict[str, Any]  # ``metrics``' per-class figures

    @classmethod
    def of(cls, sim: Simulation, found: dict[str, Any]) -> Drawn:
        """``sim`` as drawn, with ``found``, its ``metrics`` (worked out once, by the run that reports them)."""
        usable = max(int(sim.fleet.bitmap.domain_usable_gpus.sum()), 1)
        return cls(sim.timeline, usable, tuple(sim.cq_names), found["classes"])


def _smooth(values: np.ndarray, width: int) -> np.ndarray:
    if width <= 1 or len(values) < width:
        return values
    kernel = np.ones(width) / width
    return np.convolve(values, kernel, mode="same")


def plot_runs(runs: Sequence[tuple[str, Drawn]], path: Path, *, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(11, 10), constrained_layout=True)
    panels = fig.subplot_mosaic([["one", "multi"], ["queue", "queue"], ["shares", "shares"]], height_ratios=[1, 1.2, 1])
    fig.suptitle(title, fontsize=10)
    _wait_bars((panels["one"], panels["multi"]), runs)
    top = panels["queue"]
    bottom = panels["shares"]
    bottom.sharex(top)
    span = max((r.timeline.times[-1] if r.timeline.times else 0.0) for _, r in runs) or 1.0
    unit, scale = ("days", DAY) if span > 2 * DAY else ("hours", 3600.0)
    for name, drawn in runs:
        tl = drawn.timeline
        if not tl.times:
            continue
        t = np.asarray(tl.times) / scale
        top.plot(t, _smooth(np.asarray(tl.waiting, dtype=np.float64), 9), label=name, linewidth=1.2)
    top.set_ylabel("jobs waiting (queued, not started)")
    top.set_ylim(bottom=0)
    top.set_title("the queue over time: lower is better", fontsize=9)
    top.legend(loc="upper right", ncols=min(len(runs), 5), fontsize=8)
    name, first = runs[0]
    tl = first.timeline
    if tl.times:
        shares = np.asarray(tl.queue_used, dtype=np.float64).T / first.usable_gpus * 100
        bottom.stackplot(np.asarray(tl.times) / scale, *[_smooth(s, 9) for s in shares], labels=first.cq_names)
        if len(first.cq_names) <= 12:
            bottom.legend(loc="upper left", fontsize=7, ncols=min(len(first.cq_names), 6))
    bottom.set_ylabel(f"share of GPUs per queue (%), {name}")
    bottom.set_xlabel(f"time ({unit})")
    bottom.set_ylim(0, 105)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _wait_bars(axes: Any, runs: Sequence[tuple[str, Drawn]]) -> None:
    """Mean wait per policy, jobs one scale-up domain holds on the left and the rest on the right, each panel on
    its own scale (one class waits minutes where the other waits days), each bar labelled with its value."""
    names = [name for name, _ in runs]
    classes = [drawn.classes for _, drawn in runs]
    colors = [f"C{i}" for i in range(len(names))]
    for ax, (key, label) in zip(axes, CLASS_LABELS, strict=True):
        hours = [c[key]["meanWaitSeconds"] / 3600 for c in classes]
        jobs = classes[0][key]["jobs"] if classes else 0
        drawn = ax.bar(names, hours, color=colors)
        ax.bar_label(drawn, labels=[f"{h:.2f} h" for h in hours], fontsize=8, padding=2)
        ax.set_title(f"{label} ({jobs:,} jobs)", fontsize=9)
        ax.set_ylabel("mean wait (hours)")
        ax.tick_params(axis="x", labelsize=8, labelrotation=20 if len(names) > 3 else 0)
        ax.set_ylim(0, max(max(hours, default=0.0) * 1.2, 0.1))

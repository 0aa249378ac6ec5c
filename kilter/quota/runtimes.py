"""Expected runtimes of jobs: what the job declares, else what its queue's finished jobs of its size took.

The split-wait rule (``topology.split_wait``) lets a gang wait for fewer
domains for a share of its expected runtime, so it needs an estimate per job
that a real cluster has: a declared limit, or history. Declared, first found:
the ``kilter.dev/expected-runtime`` annotation (a duration), Kueue's
``kueue.x-k8s.io/max-exec-time-seconds`` label, the pod's or Job's
``activeDeadlineSeconds``. Learned: the median runtime of the last
``WINDOW`` finished workloads of the same queue and gang-size class (GPUs in
powers of two: 1, 2-3, 4-7, ...), because job length in shared clusters
depends far more on who submits and how big the job is than on anything
else a scheduler can see; the median because runtimes are heavy-tailed and
one week-long outlier must not make every job of the queue wait for days.
A class with no history borrows the queue's median over all sizes, then the
class's median over all queues; with no history at all there is no estimate.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from statistics import median

from kilter.model.durations import parse_duration
from kilter.model.errors import InputError

__all__ = [
    "EXPECTED_RUNTIME",
    "MAX_EXEC_TIME",
    "WINDOW",
    "RuntimeLearner",
    "declared_runtime",
    "size_class",
]

EXPECTED_RUNTIME = "kilter.dev/expected-runtime"
"""Job, Workload, PodGroup or pod annotation: how long the job is expected to run once started (a duration)."""

MAX_EXEC_TIME = "kueue.x-k8s.io/max-exec-time-seconds"
"""Kueue's label on a job: the most seconds it may run once admitted (Kueue evicts it after)."""

WINDOW = 256
_ANY = -1


def size_class(gpus: int) -> int:
    """0 for 1 GPU, 1 for 2-3, 2 for 4-7, ...: gangs of similar size share history."""
    return max(int(gpus), 1).bit_length() - 1


def declared_runtime(
    annotations: Mapping[str, str] | None,
    labels: Mapping[str, str] | None,
    active_deadline_s: float | None,
    *,
    path: str,
) -> float | None:
    """Seconds the job declares it runs, first found of annotation, Kueue label, deadline; None when none does."""
    raw = (annotations or {}).get(EXPECTED_RUNTIME)
    if raw is not None:
        seconds = parse_duration(raw, path=f"{path}.annotations[{EXPECTED_RUNTIME}]")
        if seconds <= 0:
            raise InputError(f"{EXPECTED_RUNTIME} must be longer than 0s", path=f"{path}.annotations")
        return seconds
    raw = (labels or {}).get(MAX_EXEC_TIME)
    if raw is not None:
        text = raw.strip()
        if not text.isascii() or not text.isdigit() or int(text) <= 0:
            raise InputError(f"{MAX_EXEC_TIME}: {raw!r} is not a whole number of seconds > 0", path=f"{path}.labels")
        return float(int(text))
    if active_deadline_s is not None and math.isfinite(active_deadline_s) and active_deadline_s > 0:
        return float(active_deadline_s)
    return None


class RuntimeLearner:
    """Median runtimes of finished workloads per (queue, size class), from a sliding window of each."""

    def __init__(self, window: int = WINDOW) -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        self._window = window
        self._seen: dict[tuple[str, int], deque[float]] = {}
        self._medians: dict[tuple[str, int], float] = {}

    def observe(self, queue: str, gpus: int, runtime_s: float) -> None:
        """A workload of ``gpus`` GPUs in ``queue`` finished after running ``runtime_s`` seconds."""
        if not math.isfinite(runtime_s) or runtime_s <= 0:
            return
        cls = size_class(gpus)
        for key in ((queue, cls), (queue, _ANY), ("", cls)):
            seen = self._seen.get(key)
            if seen is None:
                seen = self._seen[key] = deque(maxlen=self._window)
            seen.append(runtime_s)
            self._medians.pop(key, None)

    def estimate(self, queue: str, gpus: int) -> float | None:
        """The learned runtime of a job of ``gpus`` GPUs in ``queue``, or None with no history to go on."""
        cls = size_class(gpus)
        for key in ((queue, cls), (queue, _ANY), ("", cls)):
            cached = self._medians.get(key)
            if cached is not None:
                return cached
            seen = self._seen.get(key)
            if seen:
                value = self._medians[key] = float(median(seen))
                return value
        return None

    def __len__(self) -> int:
        """Finished workloads remembered (per queue and class, at most ``window`` each)."""
        return sum(len(v) for (queue, cls), v in self._seen.items() if queue and cls != _ANY)

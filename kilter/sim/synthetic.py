"""kilter's own seeded workloads, fitted to the published statistics of real GPU-cluster traces.

The project cannot ship a copy of a public trace, so ``--trace synthetic:philly`` draws a fresh one from numbers
measured on it: the mix of job sizes, a duration distribution per size, the arrival rate with its daily and weekly
cycle, and the tenant mix per size. Every attribute is an inverse transform of its own uniform stream, spawned from
``seed``, so a trace is the same on every run and a shorter trace is the start of a longer one. ``describe`` gives
the fitted statistics of any trace, so a report can set a synthetic trace beside the real one.

What the profiles leave out, on purpose: the long-run trend (Philly has almost no jobs in its first 16 days and a
busy October), so that load per hour does not depend on how many jobs are drawn; submission bursts (Philly's
gaps between submissions have a coefficient of variation of 15, a Poisson process's is 1); and the dependence of
duration on tenant. There is no second profile yet: a bigger-gang ("llm") profile needs a public trace or paper
whose statistics it can be fitted to, and ``gpu_scale`` already covers "the same workload in bigger gangs".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kilter.model.errors import InputError
from kilter.sim.trace import Row, TraceJob, check_scales, make_jobs

__all__ = ["PROFILES", "Profile", "describe", "generate"]

_HOUR_S = 3600.0
_DAY_S = 86_400.0
_WEEK_S = 7 * _DAY_S


@dataclass(frozen=True, slots=True)
class Profile:
    """A workload measured on a real trace; counts are jobs in that trace unless a field says otherwise."""

    name: str
    source: str
    jobs: int  # default number of jobs to draw
    origin_s: float  # clock time of the first submission, seconds after Monday 00:00
    gpu_jobs: tuple[tuple[int, int], ...]  # (GPUs per job, jobs)
    duration_p: tuple[float, ...]  # probabilities of the duration quantile knots
    duration_s: tuple[tuple[int, tuple[int, ...]], ...]  # (smallest GPUs of the size class, quantile at each p)
    hour_jobs: tuple[int, ...]  # jobs submitted in each hour of the day, 0–23
    weekday_jobs: tuple[int, ...]  # jobs submitted on each weekday, Monday first
    weekday_days: tuple[float, ...]  # days of each weekday from first to last submission: jobs / days = rate
    queue_classes: tuple[int, ...]  # smallest GPUs of each size class of queue_jobs
    queue_jobs: tuple[tuple[str, tuple[int, ...]], ...]  # (queue, jobs in each of queue_classes)


# Microsoft Philly, 4 Sep – 22 Dec 2017 (Jeon et al., USENIX ATC '19; CC BY 4.0), as the 82,247-job CSV of the
# Pollux artifact described in shared/data/traces/philly/SOURCE.md. The size counts are SOURCE.md's table split by
# value; every other number was counted from that file once, with the csv module and numpy.quantile (linear),
# rounded to whole seconds. Hours and weekdays are the file's wall clock. Durations clearly depend on size (median
# 1,117 s at 1 GPU, 21 s at 2, 17,410 s at 4, 23,683 s at 8), so each size class has its own quantiles; sizes
# 12–128 (289 jobs) share one class. Knots are dense in the upper tail so that mean GPU-time stays close too.
# fmt: off
_PHILLY = Profile(
    name="philly",
    source="Microsoft Philly trace, Sept–Dec 2017, 82,247 jobs, 15 virtual clusters (Jeon et al., ATC '19)",
    jobs=82_247,
    origin_s=10 * 3600 + 30 * 60 + 41.0,  # Monday 2017-09-04 10:30:41; the last job came Friday 2017-12-22 08:02:11
    gpu_jobs=(
        (1, 76_627), (2, 1_818), (4, 1_870), (8, 1_643), (12, 7),
        (16, 199), (24, 7), (32, 67), (64, 6), (128, 3),
    ),
    duration_p=(
        0, .01, .05, .1, .2, .3, .4, .5, .6, .7, .75, .8,
        .85, .875, .9, .925, .95, .975, .99, .995, .998, .999, .9995, 1,
    ),
    duration_s=(
        (1, (1, 30, 52, 62, 76, 215, 600, 1117, 1728, 2464, 2716, 3754,
             5342, 5911, 8512, 11166, 19137, 55518, 135399, 266914, 502224, 865709, 1447517, 3256045)),
        (2, (2, 5, 9, 11, 15, 17, 19, 21, 25, 33, 76, 149,
             22255, 37562, 72740, 124488, 197062, 288912, 523316, 808064, 1398359, 1474215, 1618289, 2582803)),
        (4, (3, 36, 75, 138, 405, 1696, 7468, 17410, 36288, 78660, 89394, 106284,
             151448, 176903, 184435, 196484, 273968, 499351, 907376, 1205990, 1862334, 2446301, 2648713, 2750674)),
        (8, (1, 33, 125, 216, 785, 4011, 12382, 23683, 65014, 140721, 173248, 203050,
             242252, 271624, 351982, 408314, 525618, 743403, 1060498, 2000448, 2232762, 2656479, 3011314, 4628226)),
        (12, (1, 4, 35, 72, 345, 890, 3167, 21137, 53750, 73311, 104218, 158991,
              181582, 210586, 247972, 330234, 443240, 532107, 922629, 1274181, 1514361, 1612502, 1661573, 1710643)),
    ),
    hour_jobs=(
        4367, 3374, 3835, 3780, 2400, 3950, 5732, 7159, 3802, 3447, 3510, 2979,
        2567, 2415, 2185, 2224, 3021, 2289, 2744, 2496, 3483, 3142, 3885, 3461,
    ),
    weekday_jobs=(10_136, 12_528, 13_370, 15_114, 16_954, 7_157, 6_988),
    weekday_days=(15.56, 16.0, 16.0, 16.0, 15.33, 15.0, 15.0),  # first Monday from 10:30, last Friday to 08:02
    queue_classes=(1, 2, 12),  # 1 GPU, 2–8 GPUs, 12+ GPUs: big jobs come from other tenants than small ones
    queue_jobs=(
        ("6214e9", (40_841, 385, 0)), ("11cb48", (14_607, 1_465, 19)), ("6c71a0", (9_054, 888, 11)),
        ("b436b2", (7_237, 126, 60)), ("103959", (1_571, 363, 0)), ("ee9e8c", (597, 795, 119)),
        ("0e4a51", (1_090, 345, 0)), ("ed69ec", (1_137, 0, 0)), ("7f04ca", (204, 508, 11)),
        ("2869ce", (64, 307, 51)), ("e13805", (215, 141, 18)), ("23dbec", (2, 6, 0)),
        ("51b7ef", (4, 0, 0)), ("925e2b", (1, 2, 0)), ("795a4c", (3, 0, 0)),
    ),
)
# fmt: on

PROFILES: dict[str, Profile] = {_PHILLY.name: _PHILLY}
"""Named workloads for ``--trace synthetic:NAME``."""


def generate(
    profile: str, *, jobs: int | None = None, seed: int = 0, gpu_scale: int = 1, time_scale: float = 1.0
) -> list[TraceJob]:
    """Draw a trace of ``jobs`` jobs (default: as many as the real trace had) from a named profile.

    Sizes, durations (given the size) and queues (given the size) are inverse transforms of the profile's tables.
    Arrivals are a non-homogeneous Poisson process: the weekday's jobs per day, spread over its hours by the
    hour-of-day shares, piecewise constant by the hour. It is sampled exactly by the time-rescaling theorem:
    unit-rate exponential gaps are summed and mapped back through the inverse cumulative rate. The first job falls
    at the profile's ``origin_s``, so hours of the day line up with the real trace. Times are whole seconds, as in
    the real trace, before ``gpu_scale`` and ``time_scale`` apply as in ``trace.make_jobs``. Determinism holds for
    one numpy version: only ``Generator.random`` is used, whose stream numpy has kept stable, but NEP 19 promises
    no more.
    """
    if profile not in PROFILES:
        raise InputError(f"unknown synthetic profile {profile!r}; known: {', '.join(sorted(PROFILES))}")
    spec = PROFILES[profile]
    count = spec.jobs if jobs is None else jobs
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InputError(f"jobs must be a whole number of at least 1, got {jobs!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"seed must be a whole number of at least 0, got {seed!r}")
    check_scales(gpu_scale, time_scale)
    size_u, duration_u, queue_u, gap_u = (
        np.random.Generator(np.random.PCG64(s)).random(count) for s in np.random.SeedSequence(seed).spawn(4)
    )
    sizes = np.array([gpus for gpus, _ in spec.gpu_jobs])[_pick(size_u, [n for _, n in spec.gpu_jobs])]
    durations = _durations(spec, sizes, duration_u)
    names = [name for name, _ in spec.queue_jobs]
    queues = _queues(spec, sizes, queue_u)
    submits = _arrivals(spec, gap_u)
    rows: list[Row] = [
        (submit, duration, gpus, names[queue])
        for submit, duration, gpus, queue in zip(
            submits.tolist(), durations.tolist(), sizes.tolist(), queues.tolist(), strict=True
        )
    ]
    return make_jobs(rows, gpu_scale=gpu_scale, time_scale=time_scale)


def describe(jobs: list[TraceJob], *, origin_s: float = 0.0) -> dict[str, object]:
    """The statistics a profile is fitted to, measured on any trace (read or drawn) with unscaled times.

    ``origin_s`` is the clock time of ``submit_s == 0`` in seconds after a Monday 00:00 (a profile's ``origin_s``
    for Philly); at 0, "hour" and "weekday" count from the first submission. ``offered_gpus`` is not fitted but
    follows from the rest: GPU-seconds asked for, over the submission span, i.e. the fleet the trace keeps busy.
    An empty trace describes as zeros.
    """
    n = len(jobs)
    submit = np.array([job.submit_s for job in jobs], dtype=np.float64)
    duration = np.array([job.duration_s for job in jobs], dtype=np.float64)
    gpus = np.array([job.gpus for job in jobs], dtype=np.int64)
    span_s = float(submit.max() - submit.min()) if n else 0.0
    clock = (submit + origin_s) % _WEEK_S
    hours = np.bincount((clock % _DAY_S // _HOUR_S).astype(np.int64), minlength=24)[:24]
    weekdays = np.bincount((clock // _DAY_S).astype(np.int64), minlength=7)[:7]
    sizes, size_counts = np.unique(gpus, return_counts=True)
    queues: dict[str, int] = {}
    for job in jobs:
        queues[job.queue] = queues.get(job.queue, 0) + 1
    p50, p90, p99 = np.quantile(duration, [0.5, 0.9, 0.99]).tolist() if n else (0.0, 0.0, 0.0)
    share = 1.0 / max(n, 1)
    return {
        "jobs": n,
        "span_days": span_s / _DAY_S,
        "gpus_share": {int(g): int(c) * share for g, c in zip(sizes, size_counts, strict=True)},
        "duration_s": {"p50": p50, "p90": p90, "p99": p99},
        "hour_share": (hours * share).tolist(),
        "weekday_share": (weekdays * share).tolist(),
        "queue_share": {q: c * share for q, c in sorted(queues.items(), key=lambda item: (-item[1], item[0]))},
        "offered_gpus": float(gpus @ duration) / span_s if span_s > 0 else 0.0,
    }


def _pick(u: npt.NDArray[np.float64], counts: list[int]) -> npt.NDArray[np.intp]:
    """Indices drawn with probability proportional to ``counts``; the cumulative share ends at exactly 1."""
    cumulative = np.cumsum(counts) / sum(counts)
    return np.minimum(np.searchsorted(cumulative, u, side="right"), len(counts) - 1)


def _durations(spec: Profile, sizes: npt.NDArray[np.int64], u: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Inverse transform through each size class's quantiles, log-linear between knots, in whole seconds."""
    out = np.empty(len(u), dtype=np.float64)
    size_class = np.searchsorted([low for low, _ in spec.duration_s], sizes, side="right") - 1
    for i, (_, quantiles) in enumerate(spec.duration_s):
        mine = size_class == i
        out[mine] = np.exp(np.interp(u[mine], spec.duration_p, np.log(quantiles)))
    return np.maximum(np.rint(out), 1.0)


def _queues(spec: Profile, sizes: npt.NDArray[np.int64], u: npt.NDArray[np.float64]) -> npt.NDArray[np.intp]:
    """A queue index per job, drawn from the queue mix of the job's size class."""
    out = np.empty(len(u), dtype=np.intp)
    size_class = np.searchsorted(spec.queue_classes, sizes, side="right") - 1
    for i in range(len(spec.queue_classes)):
        mine = size_class == i
        out[mine] = _pick(u[mine], [counts[i] for _, counts in spec.queue_jobs])
    return out


def _arrivals(spec: Profile, u: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Submit times in whole seconds from the first job, which falls at the clock time ``spec.origin_s``.

    ``per_hour[k]`` is the expected jobs in hour ``k`` of the week: the weekday's jobs per day, spread over its
    hours by the hour-of-day shares. Over the real trace's own days it expects exactly the real number of jobs.
    ``area`` is its running sum (expected jobs from Monday 00:00 to each hour boundary), strictly increasing because
    every hour and weekday of the profile has jobs.
    """
    hour = np.array(spec.hour_jobs, dtype=np.float64)
    per_day = np.array(spec.weekday_jobs, dtype=np.float64) / np.array(spec.weekday_days)
    per_hour = np.outer(per_day, hour / hour.sum()).ravel()
    edges_s = np.arange(169) * _HOUR_S
    area = np.concatenate(([0.0], np.cumsum(per_hour)))
    start = np.interp(spec.origin_s, edges_s, area)
    target = start + np.concatenate(([0.0], np.cumsum(-np.log1p(-u[1:]))))
    weeks, within = np.divmod(target, area[-1])
    clock = weeks * _WEEK_S + np.interp(within, area, edges_s)
    return np.asarray(np.rint(clock - spec.origin_s), dtype=np.float64)

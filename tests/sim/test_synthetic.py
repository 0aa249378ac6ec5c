"""The synthetic Philly workload: seeded, and statistically close to the real trace it was fitted to."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kilter.model.errors import InputError
from kilter.sim.synthetic import PROFILES, describe, generate
from kilter.sim.trace import TraceJob, read_trace

PHILLY = Path(__file__).resolve().parents[3] / "shared/data/traces/philly/philly.csv"
PROFILE = PROFILES["philly"]


def within_sampling_error(got: float, share: float, n: int) -> bool:
    """Five binomial standard deviations, plus a sliver for shares near 0."""
    return abs(got - share) <= 5 * math.sqrt(share * (1 - share) / n) + 1e-4


@pytest.fixture(scope="module")
def full() -> list[TraceJob]:
    return generate("philly")


@pytest.fixture(scope="module")
def full_stats(full: list[TraceJob]) -> dict[str, Any]:
    return describe(full, origin_s=PROFILE.origin_s)


def test_the_same_seed_gives_the_same_jobs() -> None:
    assert generate("philly", jobs=2_000, seed=7) == generate("philly", jobs=2_000, seed=7)


def test_another_seed_gives_other_jobs() -> None:
    one, two = generate("philly", jobs=2_000, seed=7), generate("philly", jobs=2_000, seed=8)
    assert [job.duration_s for job in one] != [job.duration_s for job in two]
    assert [job.submit_s for job in one] != [job.submit_s for job in two]


def test_a_shorter_trace_is_the_start_of_a_longer_one() -> None:
    assert generate("philly", jobs=500, seed=3) == generate("philly", jobs=5_000, seed=3)[:500]


def test_by_default_as_many_jobs_as_the_real_trace_come_sorted_from_second_zero(full: list[TraceJob]) -> None:
    assert len(full) == PROFILE.jobs == 82_247
    assert full[0].submit_s == 0.0
    assert all(a.submit_s <= b.submit_s for a, b in itertools.pairwise(full))
    assert all(job.duration_s >= 1 and job.duration_s == int(job.duration_s) for job in full)


def test_the_profile_counts_agree_with_each_other() -> None:
    sizes = dict(PROFILE.gpu_jobs)
    assert sum(sizes.values()) == sum(PROFILE.hour_jobs) == sum(PROFILE.weekday_jobs) == PROFILE.jobs
    by_class = [sum(counts[i] for _, counts in PROFILE.queue_jobs) for i in range(3)]
    assert by_class == [sizes[1], 5_331, 289]  # 1 GPU; 2, 4, 8 GPUs; 12 to 128 GPUs
    assert sum(PROFILE.weekday_days) == pytest.approx(9_408_690 / 86_400, abs=0.01)
    for _, quantiles in PROFILE.duration_s:
        assert len(quantiles) == len(PROFILE.duration_p)
        assert list(quantiles) == sorted(quantiles)


def test_the_size_mix_matches_the_profile(full_stats: dict[str, Any]) -> None:
    shares: dict[int, float] = full_stats["gpus_share"]
    assert set(shares) <= {gpus for gpus, _ in PROFILE.gpu_jobs}
    for gpus, count in PROFILE.gpu_jobs:
        assert within_sampling_error(shares.get(gpus, 0.0), count / PROFILE.jobs, PROFILE.jobs), gpus


def test_duration_quantiles_match_the_published_ones(full_stats: dict[str, Any]) -> None:
    got = full_stats["duration_s"]
    assert got["p50"] == pytest.approx(1_144, rel=0.05)
    assert got["p90"] == pytest.approx(11_265, rel=0.10)
    assert got["p99"] == pytest.approx(254_758, rel=0.10)


def test_big_jobs_run_longer_and_two_gpu_jobs_shorter_as_in_the_real_trace(full: list[TraceJob]) -> None:
    def median(gpus: int) -> float:
        return float(np.median([job.duration_s for job in full if job.gpus == gpus]))

    assert median(4) > 10 * median(1)  # real: 17,410 s against 1,117 s
    assert median(2) < median(1) / 10  # real: 21 s


def test_between_quantile_knots_durations_follow_the_real_trace(full: list[TraceJob]) -> None:
    single = [job.duration_s for job in full if job.gpus == 1]
    # 128 s lies between the knots p = 0.2 (76 s) and p = 0.3 (215 s); in the real file 25.2 % of 1-GPU jobs are
    # shorter, where log-linear interpolation puts 25.0 % and straight-line interpolation 23.7 %.
    assert sum(d < 128 for d in single) / len(single) == pytest.approx(0.252, abs=0.008)


def test_the_daily_and_weekly_cycles_show(full_stats: dict[str, Any]) -> None:
    hours: list[float] = full_stats["hour_share"]
    assert hours.index(max(hours)) == 7  # real: 8.7 % of jobs at 07:00, 2.7 % at 14:00
    assert max(hours) > 2.5 * min(hours)
    weekdays: list[float] = full_stats["weekday_share"]
    assert weekdays[4] > 2 * weekdays[6]  # Friday against Sunday; real: 20.6 % and 8.5 %


def test_the_span_follows_from_the_real_arrival_rate(full_stats: dict[str, Any]) -> None:
    assert full_stats["span_days"] == pytest.approx(108.9, rel=0.02)  # 82,247 jobs, 4 Sep to 22 Dec 2017


def test_queue_shares_match_the_profile(full_stats: dict[str, Any]) -> None:
    shares: dict[str, float] = full_stats["queue_share"]
    assert set(shares) <= {name for name, _ in PROFILE.queue_jobs}
    for name, counts in PROFILE.queue_jobs:
        assert within_sampling_error(shares.get(name, 0.0), sum(counts) / PROFILE.jobs, PROFILE.jobs), name


def test_the_biggest_tenant_submits_no_big_jobs_as_in_the_real_trace(full: list[TraceJob]) -> None:
    big = Counter(job.queue for job in full if job.gpus >= 12)
    assert big["6214e9"] == 0
    assert big.most_common(1)[0][0] == "ee9e8c"  # 119 of the real 289


def test_scales_multiply_gpus_and_times() -> None:
    plain = generate("philly", jobs=300, seed=5)
    scaled = generate("philly", jobs=300, seed=5, gpu_scale=8, time_scale=0.25)
    assert [job.gpus for job in scaled] == [8 * job.gpus for job in plain]
    assert [job.submit_s for job in scaled] == [job.submit_s / 4 for job in plain]
    assert [job.duration_s for job in scaled] == [job.duration_s / 4 for job in plain]


@pytest.mark.parametrize(
    ("profile", "options", "says"),
    [
        pytest.param("alibaba", {}, "unknown synthetic profile 'alibaba'; known: philly", id="unknown profile"),
        pytest.param("philly", {"jobs": 0}, "jobs", id="no jobs"),
        pytest.param("philly", {"seed": -1}, "seed", id="a negative seed"),
        pytest.param("philly", {"gpu_scale": 0}, "gpu_scale", id="gpu_scale 0"),
    ],
)
def test_bad_arguments_are_input_errors(profile: str, options: dict[str, int], says: str) -> None:
    with pytest.raises(InputError, match=says):
        generate(profile, **options)


def test_describe_counts_a_small_trace_by_hand() -> None:
    jobs = [
        TraceJob(0, 0.0, 100.0, 1, "a"),
        TraceJob(1, 3_600.0, 300.0, 2, "b"),
        TraceJob(2, 86_400.0, 200.0, 1, "a"),
        TraceJob(3, 86_400.0 * 2, 400.0, 1, "a"),
    ]
    stats = describe(jobs, origin_s=86_400.0 * 6 + 23 * 3_600)  # the first job on Sunday at 23:00
    assert stats["jobs"] == 4
    assert stats["span_days"] == 2.0
    assert stats["gpus_share"] == {1: 0.75, 2: 0.25}
    assert stats["duration_s"] == pytest.approx({"p50": 250.0, "p90": 370.0, "p99": 397.0})  # linear, 300 to 400
    assert stats["hour_share"] == [0.25] + [0.0] * 22 + [0.75]  # one job at 00:00 Monday, three at 23:00
    assert stats["weekday_share"] == [0.5, 0.25, 0.0, 0.0, 0.0, 0.0, 0.25]
    queue_share = stats["queue_share"]
    assert isinstance(queue_share, dict)
    assert list(queue_share.items()) == [("a", 0.75), ("b", 0.25)]  # the largest first
    assert stats["offered_gpus"] == 1_300.0 / (2 * 86_400.0)  # 100 + 600 + 200 + 400 GPU-seconds


@pytest.fixture(scope="module")
def real() -> list[TraceJob]:
    if not PHILLY.exists():
        pytest.skip(f"the real Philly trace is not at {PHILLY} (it lives in ../shared next to the repository)")
    return read_trace(PHILLY)


@pytest.fixture(scope="module")
def real_stats(real: list[TraceJob]) -> dict[str, Any]:
    return describe(real, origin_s=PROFILE.origin_s)


def test_the_profile_constants_are_counted_from_the_real_trace(real: list[TraceJob]) -> None:
    gpus = np.array([job.gpus for job in real])
    duration = np.array([job.duration_s for job in real])
    clock = np.array([job.submit_s for job in real]) + PROFILE.origin_s
    assert Counter(gpus.tolist()) == dict(PROFILE.gpu_jobs)
    assert tuple(np.bincount((clock % 86_400 // 3_600).astype(int), minlength=24)) == PROFILE.hour_jobs
    assert tuple(np.bincount((clock % 604_800 // 86_400).astype(int), minlength=7)) == PROFILE.weekday_jobs
    lows = [low for low, _ in PROFILE.duration_s]
    for low, high, (_, quantiles) in zip(lows, [*lows[1:], 10**9], PROFILE.duration_s, strict=True):
        mine = duration[(gpus >= low) & (gpus < high)]
        assert tuple(np.rint(np.quantile(mine, PROFILE.duration_p)).astype(int)) == quantiles, low
    size_class = np.searchsorted(PROFILE.queue_classes, gpus, side="right") - 1
    queue = np.array([job.queue for job in real])
    for name, counts in PROFILE.queue_jobs:
        assert tuple(np.bincount(size_class[queue == name], minlength=3)) == counts, name


def test_the_synthetic_trace_describes_like_the_real_one(
    full_stats: dict[str, Any], real_stats: dict[str, Any]
) -> None:
    assert full_stats["jobs"] == real_stats["jobs"]
    assert full_stats["span_days"] == pytest.approx(real_stats["span_days"], rel=0.02)
    for gpus, share in real_stats["gpus_share"].items():
        assert full_stats["gpus_share"].get(gpus, 0.0) == pytest.approx(share, abs=0.003), gpus
    for key, value in real_stats["duration_s"].items():
        assert full_stats["duration_s"][key] == pytest.approx(value, rel=0.10), key
    assert full_stats["hour_share"] == pytest.approx(real_stats["hour_share"], abs=0.006)
    assert full_stats["weekday_share"] == pytest.approx(real_stats["weekday_share"], abs=0.01)
    for queue, share in real_stats["queue_share"].items():
        assert full_stats["queue_share"].get(queue, 0.0) == pytest.approx(share, abs=0.004), queue
    assert full_stats["offered_gpus"] == pytest.approx(real_stats["offered_gpus"], rel=0.25)

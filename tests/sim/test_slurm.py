"""Slurm's main scheduler and backfill over ``topology/block``: reservations, backfill, limits, quota, order.

Fleets are NVL72 racks (18 trays of 4 GPUs); jobs of 4k GPUs are k whole
trays. Times are whole minutes, so with ``bf_resolution`` 60 the node-space
grid adds no rounding, and the backfill cycle runs on every 30 s tick after
a change (``bf_interval``). The rules follow ``_attempt_backfill`` in
SchedMD/slurm 284c3b95 ``src/plugins/sched/backfill/backfill.c``.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from typing import Any

import pytest

from kilter.model.errors import InputError
from kilter.sim.engine import SimConfig
from kilter.sim.failure_model import FailureSettings
from kilter.sim.queues import queue_setup
from kilter.sim.run import simulate
from kilter.sim.slurm_backfill import YEAR_S, SlurmSimulation
from kilter.sim.slurm_block import SlurmBlock, segment_for
from kilter.sim.slurm_cycle import BackfillCycle, BackfillSettings, Reservation, Running
from kilter.sim.split_hold import RuntimeEstimate, WaitSettings
from kilter.sim.trace import TraceJob
from kilter.topology.fleet import Fleet
from tests.sim.builders import trays
from tests.sim.conftest import jobs, nvl72

MINUTE = BackfillSettings(resolution_s=60.0)


def run(
    fleet: Fleet,
    trace: list[TraceJob],
    *,
    estimate: RuntimeEstimate = "oracle",
    objects: list[dict[str, Any]] | None = None,
    seed: int = 0,
) -> tuple[SlurmSimulation, list[BackfillCycle]]:
    queues = queue_setup(objects or [], fleet, Counter(j.queue for j in trace))
    # No split slowdown: true ends stay on the minute grid (a job slowed by a split would end off it).
    config = SimConfig(split_model="none", split_wait=WaitSettings(runtime_estimate=estimate, seed=seed))
    cycles: list[BackfillCycle] = []
    sim = SlurmSimulation(fleet, trace, SlurmBlock(), queues, config, settings=MINUTE, on_cycle=cycles.append)
    sim.run()
    return sim, cycles


def at(cycles: list[BackfillCycle], now: float) -> BackfillCycle:
    (cycle,) = [c for c in cycles if c.now == now]
    return cycle


@pytest.mark.parametrize(
    ("duration", "start"),
    [
        # Job 1 (12 trays) is reserved trays 0-11 from 1200, when job 0 (trays 0-9) ends. Job 2 (8 trays)
        # would use idle trays 10-17: with a 1140 s limit it ends at 60 + 1140 = 1200, before trays 10 and
        # 11 are needed, so it starts now.
        pytest.param(1140, 60.0, id="ends by the reservation: backfilled at once"),
        # With 1200 s it would hold trays 10 and 11 past 1200; 6 other idle trays are too few. Its own
        # reservation: at 1200 only trays 12-17 are free of job 1's, so when job 1 ends at 1800.
        pytest.param(1200, 1800.0, id="would delay the reservation: waits"),
    ],
)
def test_a_job_starts_behind_a_blocked_one_only_if_it_does_not_delay_its_reservation(
    duration: float, start: float
) -> None:
    fleet = nvl72(1)
    sim, cycles = run(fleet, jobs((0, 1200, 40), (60, 600, 48), (60, duration, 32)))
    first = at(cycles, 60.0).steps[0]
    assert first == Reservation(1, 1200.0, 1800.0, tuple(trays(fleet, 0)[:12]))
    assert sim.outcome.start.tolist() == [0.0, 1200.0, start]


def test_a_reservation_comes_from_time_limits_not_true_durations() -> None:
    # Declared limits are the durations times e^N(0,1), drawn from (seed 0, job): job 0's is 1380 s, so job 1
    # is reserved from 1380, not from 1200, when job 0 really ends (and then starts at once, at 1200).
    sim, cycles = run(nvl72(1), jobs((0, 1200, 40), (60, 600, 48), (60, 60, 4)), estimate="declared")
    assert sim.limit_s.tolist() == [1380.0, 720.0, 60.0]
    assert at(cycles, 60.0).reservations == [Reservation(1, 1380.0, 1380.0 + 720.0, tuple(range(12)))]
    assert sim.outcome.start.tolist() == [0.0, 1200.0, 60.0]


def test_a_job_past_its_time_limit_is_expected_to_end_one_more_limit_from_now() -> None:
    # Job 0 (one tray, 600 s) goes to rack 1, job 1 (17 trays, no history yet: no limit) fills rack 1 for good.
    # Job 0 teaches the learner 600 s; job 2 (rack 0) has no history of its size and borrows its queue's
    # median, 600 s, but runs 5000 s. At 1980 it is overdue (660 + 600 < 1980): backfill expects it to end
    # at 1980 + 600 (``_guess_job_end``, OverTimeLimit=UNLIMITED), and at 3000 at 3600. Jobs 4 and 5 can
    # start on rack 1's idle tray, so job 3's reservation is worth making.
    trace = jobs((0, 600, 4), (0, 10000, 68), (660, 5000, 72), (1980, 100, 72), (1980, 100, 4), (3000, 100, 4))
    sim, cycles = run(nvl72(2), trace, estimate="learned")
    assert sim.limit_s[2] == 600.0
    assert at(cycles, 1980.0).reservations[0].start_s == 2580.0
    assert at(cycles, 3000.0).reservations[0].start_s == 3600.0
    assert sim.outcome.start.tolist() == [0.0, 0.0, 660.0, 5660.0, 1980.0, 3000.0]


def test_a_job_with_no_estimate_runs_under_an_unlimited_limit_and_gets_no_reservation() -> None:
    # MaxTime=UNLIMITED reads as a year, past bf_window (30 days): job 1 gets no reservation, and job 2
    # may take the trays it waits for.
    sim, cycles = run(nvl72(1), jobs((0, 1000, 40), (60, 100, 48), (60, 100, 32)), estimate="none")
    assert (sim.limit_s == YEAR_S).all()
    assert not any(c.reservations for c in cycles)
    assert sim.outcome.start.tolist() == [0.0, 1000.0, 60.0]


def test_the_backfill_cycle_runs_on_the_next_tick_after_a_change_and_the_main_scheduler_at_once() -> None:
    # Job 1 blocks the rack; job 2 arrives at 61 and fits behind it, but only backfill may start it: at 90.
    sim, _ = run(nvl72(1), jobs((0, 1200, 40), (60, 600, 48), (61, 600, 4), (2000, 100, 4)))
    assert sim.outcome.start.tolist() == [0.0, 1200.0, 90.0, 2000.0]


def team(name: str, nominal: int) -> dict[str, Any]:
    resources = [{"name": "nvidia.com/gpu", "nominalQuota": nominal}]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "resourceGroups": [
                {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "gb200-nvl72", "resources": resources}]}
            ]
        },
    }


def test_a_job_over_its_queue_quota_neither_starts_nor_blocks_nor_gets_a_reservation() -> None:
    # Team a may hold 24 GPUs and runs 8 until 1000; its 20-GPU job would take it to 28. It is skipped
    # (GrpTRES): a's 4-GPU job and b's 8-GPU job behind it start at once, and it starts at 1000.
    trace = jobs((0, 1000, 8, "a"), (10, 100, 20, "a"), (20, 100, 4, "a"), (20, 100, 8, "b"))
    sim, cycles = run(nvl72(1), trace, objects=[team("a", 24), team("b", 24)])
    assert sim.outcome.start.tolist() == [0.0, 1000.0, 20.0, 20.0]
    assert not any(r.job == 1 for c in cycles for r in c.reservations)


def test_simulate_runs_slurm_in_its_own_engine_and_refuses_what_it_does_not_model() -> None:
    r = simulate(lambda: nvl72(1), jobs((0, 100, 8)), "slurm")
    assert isinstance(r.simulation, SlurmSimulation) and r.metrics["completed"] == 1
    for config in (SimConfig(quota="volcano"), SimConfig(failures=FailureSettings(node_mtbf_h=1000.0))):
        with pytest.raises(InputError, match="slurm"):
            simulate(lambda: nvl72(1), jobs((0, 100, 8)), "slurm", config=config)


def test_kueues_fair_sharing_leaves_the_slurm_order_as_it_is() -> None:
    # Slurm orders by priority (all equal) and submit time; Kueue's fair sharing is Kueue's admission.
    trace = jobs((0, 1000, 32, "a"), (10, 500, 36, "b"), (20, 100, 8, "a"), (30, 300, 16, "b"))
    objects = [team("a", 36), team("b", 36)]
    starts = [
        simulate(
            lambda: nvl72(1), trace, "slurm", queue_objects=objects, config=SimConfig(fair=fair)
        ).simulation.outcome.start.tolist()
        for fair in (False, True)
    ]
    assert starts[0] == starts[1] == [0.0, 10.0, 1000.0, 510.0]


# ---------------------------------------------------------------------- brute force on small random cases


def expected_end(job: Running, now: float) -> float:
    """When backfill expects a running job to end: start + limit, or one limit from now once past it."""
    end = job.start_s + job.limit_s
    return end if end > now else now + job.limit_s


def pods_of(gpus: int) -> list[int]:
    full, rest = divmod(gpus, 4)
    return [4] * full + ([rest] if rest else [])


def fits(fleet: Fleet, usable: set[int], nodes: int) -> bool:
    """The block rule on the trays usable then: one rack for a job one rack holds, else whole segments, all in
    one leaf when a leaf (two racks here, BlockSizes=18,36) is big enough for the job."""
    per_rack = Counter(int(fleet.node_domain[n]) for n in usable)
    segment = segment_for(nodes, 18)
    if not segment:
        return max(per_rack.values(), default=0) >= nodes
    whole = {rack: c // segment for rack, c in per_rack.items()}
    if nodes > 36:
        return sum(whole.values()) >= nodes // segment
    per_leaf = Counter[int]()
    for rack, w in whole.items():
        per_leaf[int(fleet.domain_group[0][rack])] += w
    return max(per_leaf.values(), default=0) >= nodes // segment


def brute_force_start(
    fleet: Fleet,
    trace: list[TraceJob],
    *,
    now: float,
    running: dict[int, Running],
    reserved: list[Reservation],
    job: int,
    limit: float,
) -> float:
    """The first time from ``now`` at which ``job`` fits on trays that have its GPUs idle once running jobs end
    as expected and that no earlier reservation holds during its limit: tried at every moment something
    frees up (now, each expected end, each reservation's end), the only moments a fit can begin."""
    pods = pods_of(trace[job].gpus)
    need = max(pods)
    bm = fleet.bitmap
    moments = {now} | {expected_end(r, now) for r in running.values()} | {r.end_s for r in reserved}
    for t in sorted(m for m in moments if m >= now):
        used = Counter[int]()
        for r in running.values():
            if expected_end(r, now) > t:
                for node, gpus in zip(r.nodes, r.pod_gpus, strict=True):
                    used[node] += gpus
        held = {n for r in reserved if r.start_s < t + limit and r.end_s > t for n in r.nodes}
        usable = {
            n
            for n in range(fleet.n_nodes)
            if bm.node_usable_flags[n] and bm.node_gpu_counts[n] - used[n] >= need and n not in held
        }
        if fits(fleet, usable, len(pods)):
            return float(t)
    raise AssertionError("a job that fits the idle fleet must fit once everything has ended")


def random_trace(rng: random.Random) -> list[TraceJob]:
    sizes = [1, 2, 4, 8, 12, 20, 32, 48, 64, 72, 80, 96, 144]  # GPUs: partial trays, whole ones, segments
    rows = []
    t = 0.0
    for _ in range(rng.randint(6, 14)):
        t += 60.0 * rng.randint(0, 4)
        rows.append((t, 60.0 * rng.randint(1, 30), rng.choice(sizes)))
    return jobs(*rows)


def before(cycle: BackfillCycle, job: int, trace: list[TraceJob]) -> tuple[dict[int, Running], list[Reservation]]:
    """What ran and what was reserved when ``cycle`` came to ``job``: its running jobs, and the starts and
    reservations of the jobs it tested before."""
    ahead = set(cycle.tested[: cycle.tested.index(job)])
    running = dict(cycle.running)
    reserved = []
    for s in cycle.steps:
        if s.job not in ahead:
            continue
        if s.started:
            running[s.job] = Running(s.nodes, tuple(pods_of(trace[s.job].gpus)), s.start_s, s.end_s - s.start_s)
        else:
            reserved.append(s)
    return running, reserved


@pytest.mark.parametrize("seed", range(40))
def test_no_reservation_is_delayed_by_a_backfilled_job_and_none_starts_out_of_order(seed: int) -> None:
    rng = random.Random(seed)
    trace = random_trace(rng)
    fleet = nvl72(3, per_block=2, unhealthy=2, seed=seed)
    sim, cycles = run(fleet, trace, estimate="declared", seed=seed)
    window = BackfillSettings().window_s

    def earliest(cycle: BackfillCycle, job: int, running: dict[int, Running], reserved: list[Reservation]) -> float:
        limit = float(sim.limit_s[job])
        return brute_force_start(fleet, trace, now=cycle.now, running=running, reserved=reserved, job=job, limit=limit)

    for cycle in cycles:
        everyone = dict(cycle.running)
        for s in cycle.steps:
            if s.started:
                everyone[s.job] = Running(s.nodes, tuple(pods_of(trace[s.job].gpus)), s.start_s, s.end_s - s.start_s)
        for step in cycle.reservations:
            running, reserved = before(cycle, step.job, trace)
            # The reservation is the earliest start, by brute force, given what ran and was reserved before...
            assert step.start_s == math.floor(earliest(cycle, step.job, running, reserved) / 60) * 60
            # ...and the jobs backfilled after it did not move it: with all of them it is no later.
            assert math.floor(earliest(cycle, step.job, everyone, reserved) / 60) * 60 == step.start_s
    # Order: a job starts ahead of an earlier one only in a backfill cycle that came to the earlier one
    # first and either reserved it trays or times the later one does not touch, or found it could not
    # start within bf_window (no reservation).
    start = sim.outcome.start
    for a, b in itertools.combinations(range(len(trace)), 2):
        if not start[b] < start[a]:
            continue
        (cycle,) = [c for c in cycles if c.now == start[b] and b in c.started]
        assert cycle.tested.index(a) < cycle.tested.index(b)
        (run_b,) = [s for s in cycle.steps if s.job == b]
        reservation = [s for s in cycle.steps if s.job == a]
        if not reservation:
            running, reserved = before(cycle, a, trace)
            assert earliest(cycle, a, running, reserved) > cycle.now + window
            continue
        overlap = set(reservation[0].nodes) & set(run_b.nodes)
        assert not overlap or run_b.end_s <= reservation[0].start_s

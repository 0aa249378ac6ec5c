"""A rollout over every domain while a trace runs: kilter's planned drain against the rolling drain in name order.

Two GB200 racks of 72 GPUs (18 trays of 4) unless a test says otherwise; a
job of 64 GPUs fills 16 trays of one rack, so its rack has 8 GPUs free.
Checkpoints every 1800 s unless a test sets them; a kill loses the run time
since the last one on all the job's GPUs.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from kilter.sim.compose import build
from kilter.sim.engine import SimConfig, Simulation
from kilter.sim.failing import NodeFailures
from kilter.sim.failure_model import FailureSettings
from kilter.sim.maintenance import Maintenance
from kilter.sim.maintenance_spec import MaintenanceSettings, Order
from kilter.sim.metrics import metrics
from kilter.sim.parts import Part
from kilter.sim.policies import make_policy
from kilter.sim.queues import queue_setup
from kilter.sim.split_hold import RuntimeEstimate, WaitSettings
from kilter.sim.trace import TraceJob
from kilter.topology.fleet import Fleet
from tests.sim.conftest import jobs, nvl72
from tests.sim.test_failing import Script

HOUR = 3600.0


def rollout(
    trace: list[TraceJob],
    order: Order,
    *,
    at_s: float,
    k: int,
    step_s: float = HOUR,
    checkpoint_s: float = 1800.0,
    estimate: RuntimeEstimate = "learned",
    fleet: Fleet | None = None,
) -> Simulation:
    fleet = fleet or nvl72(2)
    config = SimConfig(
        split_wait=WaitSettings(runtime_estimate=estimate),
        failures=FailureSettings(math.inf, checkpoint_s=checkpoint_s, restart_s=300.0),
        maintenance=MaintenanceSettings(at_s=at_s, step_s=step_s, k=k, order=order),
    )
    queues = queue_setup([], fleet, Counter(j.queue for j in trace))
    sim = build(fleet, trace, make_policy("kilter"), queues, config)
    sim.run()
    return sim


def maintenance_of(sim: Simulation) -> Maintenance:
    part = sim.part(Maintenance)
    assert part is not None
    return part


def kills_of(sim: Simulation, job: int) -> int:
    return sum(d.killed.count(job) for d in maintenance_of(sim).rollout.domains)


def record_of(sim: Simulation, job: int) -> int:
    """The index of the domain record whose domain held ``job`` when the rollout began (its cordon's job set)."""
    return next(i for i, d in enumerate(maintenance_of(sim).rollout.domains) if job in d.killed or job in d.waits_for)


# H (64 GPUs, 0-3600 s) teaches the learner that such jobs run an hour; A (64 GPUs) starts at 3600 as H ends, so
# it is expected to end at 7200. The rollout begins at 5000 with both racks at once (k=2).
ABOUT_TO_END = jobs((0, 3600, 64), (3600, 3600, 64))


def test_kilter_waits_for_a_job_about_to_end_and_loses_nothing() -> None:
    sim = rollout(ABOUT_TO_END, "kilter", at_s=5000, k=2)
    # Kill at 5000: 64 GPUs x 1400 s (no checkpoint yet) = 24.9 GPU-h; wait to 7200: 8 free GPUs x 2200 s = 4.9.
    assert kills_of(sim, 1) == 0
    assert sim.outcome.end[1] == 7200
    assert maintenance_of(sim).rollout.lost_gpu_s == 0
    waited = maintenance_of(sim).rollout.domains[record_of(sim, 1)]
    assert waited.drained_s == 7200 and waited.back_s == 7200 + HOUR
    assert maintenance_of(sim).rollout.idle_gpu_s == 8 * (7200 - 5000)


def test_naive_kills_the_job_about_to_end_and_it_runs_again_from_the_start() -> None:
    sim = rollout(ABOUT_TO_END, "naive", at_s=5000, k=2)
    assert kills_of(sim, 1) == 1
    assert maintenance_of(sim).rollout.lost_gpu_s == 64 * 1400
    assert maintenance_of(sim).rollout.idle_gpu_s == 0
    # Both racks are back at 5000 + 3600; A restarts (300 s) and redoes its whole hour.
    assert sim.outcome.end[1] == 5000 + HOUR + 300 + 3600


def test_kilter_drains_as_soon_as_the_job_it_waits_for_ends_before_its_estimate() -> None:
    # H teaches 7200 s; A starts at 7200, expected to end at 14400, truly ends at 9000.
    trace = jobs((0, 7200, 64), (7200, 1800, 64))
    sim = rollout(trace, "kilter", at_s=8900, k=2)
    # Kill at 8900: 64 x 1700 s = 30.2 GPU-h; wait to 14400: 8 x 5500 s = 12.2 GPU-h, so the plan waits.
    record = maintenance_of(sim).rollout.domains[record_of(sim, 1)]
    assert record.planned_drain_s == 14400
    assert record.drained_s == 9000
    assert kills_of(sim, 1) == 0
    assert maintenance_of(sim).rollout.idle_gpu_s == 8 * 100


def test_a_job_that_outruns_its_estimate_is_killed_at_the_planned_moment() -> None:
    # The plan sees only the learned hour, never A's true 20000 s: it waits to 7200 and then kills A, which by then
    # has run 3600 s with no checkpoints: more than naive's kill at 5000 loses. A loss, reported as such.
    trace = jobs((0, 3600, 64), (3600, 20000, 64))
    planned = rollout(trace, "kilter", at_s=5000, k=2, checkpoint_s=0)
    naive = rollout(trace, "naive", at_s=5000, k=2, checkpoint_s=0)
    record = maintenance_of(planned).rollout.domains[record_of(planned, 1)]
    assert record.drained_s == record.planned_drain_s == 7200
    assert record.killed == [1]
    assert (
        maintenance_of(planned).rollout.lost_gpu_s == 64 * 3600 > maintenance_of(naive).rollout.lost_gpu_s == 64 * 1400
    )


@pytest.mark.parametrize("order", ["kilter", "naive"])
def test_a_job_spanning_two_domains_is_killed_once(order: Order) -> None:
    # 100 GPUs over both racks (72 + 28); k=1, so the racks go one after the other, 4000 s and 4000 + 3600 s.
    sim = rollout(jobs((0, 36000, 100)), order, at_s=4000, k=1)
    assert kills_of(sim, 0) == 1
    assert maintenance_of(sim).rollout.lost_gpu_s == 100 * (4000 - 3600)  # since the checkpoint at 3600 s
    # It needs both racks: it starts again once the second is back (4000 + 2 h), restarts and resumes at 3600 s.
    assert sim.outcome.end[0] == 4000 + 2 * HOUR + 300 + (36000 - 3600)
    assert [len(d.killed) for d in maintenance_of(sim).rollout.domains].count(0) == 1


# Eight racks (more than the planner tries exhaustively, so its first plans go by regret) and a trace of jobs of
# every size from a tray to two racks, arriving over 12 hours.
BUSY = jobs(*((i * 400.0, 1200.0 + (i * 1777) % 30000, (4, 8, 16, 36, 64, 72, 100)[i % 7]) for i in range(110)))


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("order", ["kilter", "naive"])
def test_every_domain_is_maintained_once_and_never_more_than_k_at_once(order: Order, k: int) -> None:
    fleet = nvl72(8)
    sim = rollout(BUSY, order, at_s=3 * HOUR, k=k, step_s=2 * HOUR, estimate="declared", fleet=fleet)
    records = maintenance_of(sim).rollout.domains
    assert sorted(d.domain for d in records) == sorted(fleet.domain_ids)
    for d in records:
        assert d.cordoned_s <= d.drained_s <= d.cordoned_s + maintenance_of(sim).settings_m.max_wait_s
        assert d.back_s == d.drained_s + 2 * HOUR
    for t in sorted({d.cordoned_s for d in records}):  # the count of domains away only grows at a cordon
        assert sum(d.cordoned_s <= t < d.back_s for d in records) <= k
    assert maintenance_of(sim).rollout.most_out <= k
    assert metrics(sim)["domainsMaintained"] == 8
    assert metrics(sim)["completed"] == len(BUSY)
    nothing_runs_there_when_drained(sim)


def nothing_runs_there_when_drained(sim: Simulation) -> None:
    """The fleet is as it began: no GPU booked, every domain back to the GPUs it had."""
    bm = sim.fleet.bitmap
    assert int(bm.node_used_gpus.sum()) == 0
    assert (bm.domain_usable_gpus == maintenance_of(sim)._capacity).all()


def test_both_orders_kill_only_what_runs_and_report_the_same_rollout_shape() -> None:
    fleet_kilter, fleet_naive = nvl72(8), nvl72(8)
    a = rollout(BUSY, "kilter", at_s=3 * HOUR, k=2, step_s=2 * HOUR, estimate="declared", fleet=fleet_kilter)
    b = rollout(BUSY, "naive", at_s=3 * HOUR, k=2, step_s=2 * HOUR, estimate="declared", fleet=fleet_naive)
    ma, mb = metrics(a), metrics(b)
    assert ma["domainsMaintained"] == mb["domainsMaintained"] == 8
    assert ma["steps"] == mb["steps"] == 4
    assert mb["gpuHoursIdleCordoned"] == 0  # the naive drain never waits
    assert mb["rolloutHours"] == 4 * 2  # four steps of 2 h, back to back
    assert ma["rolloutHours"] >= mb["rolloutHours"]  # waiting can only stretch it
    assert ma["jobsKilled"] == sum(len(d.killed) for d in maintenance_of(a).rollout.domains)
    assert ma["plans"] and sum(ma["plans"].values()) == 4


class Usable(Part):
    """Records, after every instant's events, whether each watched node is usable (added last, it sees the rollout's
    and the failures' doings of that instant)."""

    def __init__(self, sim: Simulation, nodes: tuple[int, ...]) -> None:
        self.sim = sim
        self.nodes = nodes
        self.seen: dict[float, tuple[bool, ...]] = {}

    def on_events(self, now: float) -> None:
        flags = self.sim.fleet.bitmap.node_usable_flags
        self.seen[now] = tuple(bool(flags[n]) for n in self.nodes)


def test_nodes_fail_during_a_rollout_counted_by_both_and_the_rollout_and_jobs_complete() -> None:
    # Rack 0 is nodes 0-17, rack 1 nodes 18-35; the naive rollout takes rack 0 out at 1000 (killing both jobs, which
    # start again in rack 1 and compute from 1300), then rack 1 at 4600 when rack 0 is back, until 8200. Node 20
    # (rack 1, under job 1) fails at 1500 and returns at 5000, while rack 1 is out; node 5 (rack 0) fails at 2000
    # and returns at 3000, while rack 0 is out: each comes back cordoned and is usable again only with its rack.
    trace = jobs((0, 3 * HOUR, 8), (100, 1800, 4))
    fleet = nvl72(2)
    config = SimConfig(
        failures=FailureSettings(1e9, repair_h=1.0, checkpoint_s=600.0, restart_s=300.0),
        maintenance=MaintenanceSettings(at_s=1000, step_s=HOUR, k=1, order="naive"),
    )
    queues = queue_setup([], fleet, Counter(j.queue for j in trace))
    clock = Script((1500.0, 20, True), (2000.0, 5, True), (3000.0, 5, False), (5000.0, 20, False))
    sim = build(fleet, trace, make_policy("kilter"), queues, config, clock=clock)
    watch = Usable(sim, (5, 20))
    sim.add(watch)
    sim.run()
    failures = sim.part(NodeFailures)
    assert failures is not None
    # The failures count their own: two nodes, one gang hit (job 1, 200 s past its restart, no checkpoint yet),
    # repaired in its rack.
    st = failures.stats
    assert (st.injected, st.gangs_hit, st.repairs, st.repairs_same_domain, st.evictions) == (2, 1, 1, 1, 0)
    assert st.lost_gpu_s == 4 * 200
    # The rollout counts its own and completes: both racks maintained, job 0 killed at both drains.
    r = maintenance_of(sim).rollout
    assert [(d.drained_s, d.back_s, d.killed) for d in r.domains] == [(1000.0, 4600.0, [0, 1]), (4600.0, 8200.0, [0])]
    assert r.lost_gpu_s == 8 * 400 + 4 * 300 + 8 * 300  # since the checkpoints at 600, 600 and 3000 s of run time
    # A node back from repair stays out with its rack, and is usable again when its rack is.
    assert watch.seen[3000.0] == (False, False) and watch.seen[4600.0] == (True, False)
    assert watch.seen[5000.0] == (True, False) and watch.seen[8200.0] == (True, True)
    # Every job completes: job 1 resumed at 1800 (repair, restart) with its 1200 s left.
    assert sim.outcome.end[1] == 3000.0 and not np.isnan(sim.outcome.end).any()
    m = metrics(sim)
    assert (m["completed"], m["failuresInjected"], m["jobsKilled"], m["domainsMaintained"]) == (2, 2, 3, 2)
    nothing_runs_there_when_drained(sim)

"""Node failures in the simulator: what a failure costs a gang, and how kilter, Kueue TAS and requeue recover it."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pytest

from kilter.sim.compose import build
from kilter.sim.engine import QuotaMode, SimConfig, Simulation
from kilter.sim.failing import FailureStats, NodeFailures
from kilter.sim.failure_model import FailurePolicy, FailureSettings, NodeClock
from kilter.sim.metrics import metrics
from kilter.sim.policies import make_policy
from kilter.sim.queues import queue_setup
from kilter.sim.run import simulate
from kilter.sim.trace import TraceJob
from kilter.topology import repair, spares
from kilter.topology.fleet import Fleet
from tests.sim.conftest import jobs, nvl72
from tests.sim.test_engine import Recorder


class Script:
    """A failure clock that fires the given (time, node, fails) events and nothing else."""

    def __init__(self, *events: tuple[float, int, bool]) -> None:
        self.events = sorted(events)
        self.down: set[int] = set()

    def next_s(self) -> float:
        return self.events[0][0] if self.events else math.inf

    def pop(self) -> tuple[float, int, bool]:
        t, node, fails = self.events.pop(0)
        (self.down.add if fails else self.down.discard)(node)
        return t, node, fails


def settings(recovery: FailurePolicy | None = None, **kw: Any) -> FailureSettings:
    return FailureSettings(node_mtbf_h=1e9, **{"repair_h": 10.0, "checkpoint_s": 1200.0, "restart_s": 300.0, **kw},
                           policy=recovery)  # fmt: skip


def run_failing(
    trace: list[TraceJob], *events: tuple[float, int, bool], policy: str = "kilter", fleet: Fleet | None = None,
    quota: QuotaMode = "kueue", **kw: Any,
) -> Simulation:  # fmt: skip
    fleet = fleet or nvl72(2)
    queues = queue_setup([], fleet, Counter(j.queue for j in trace))
    config = SimConfig(failures=settings(**kw), quota=quota, fair=quota == "volcano")
    sim = build(fleet, trace, make_policy(policy), queues, config, clock=Script(*events))
    sim.run()
    return sim


def failures_of(sim: Simulation) -> NodeFailures:
    failures = sim.part(NodeFailures)
    assert failures is not None
    return failures


def stats_of(sim: Simulation) -> FailureStats:
    return failures_of(sim).stats


def placed(trace: list[TraceJob], policy: str = "kilter") -> dict[int, list[int]]:
    """Each job's nodes where the run without failures put them (a failing run is the same until a failure)."""
    fleet = nvl72(2)
    recorder = Recorder(make_policy(policy))
    build(fleet, trace, recorder, queue_setup([], fleet, Counter(j.queue for j in trace)), SimConfig()).run()
    return {g.job: nodes.tolist() for g, nodes in recorder.answers}


# One 8-GPU gang (two trays) for an hour; a 64-GPU job first fills 16 trays of one rack (and the gang best-fits the
# last two trays there) when ``full`` is asked for.
ALONE = jobs((0, 3600, 8))
FULL_RACK = jobs((0, 20000, 64), (0, 3600, 8))


@pytest.mark.parametrize(
    ("checkpoint_s", "end", "lost_gpu_s"),
    [
        # Ran 2000 s: checkpoints at 1200 keep 1200 s of work, 800 s x 8 GPUs lost; 2400 s left after a 300 s restart.
        pytest.param(1200.0, 2000 + 300 + 2400, 800 * 8, id="checkpoint every 1200 s loses 800 s"),
        # Every 500 s: the failure lands on a checkpoint (2000 = 4 x 500), nothing lost; 1600 s left.
        pytest.param(500.0, 2000 + 300 + 1600, 0, id="failure on a checkpoint loses nothing"),
        # No checkpoints: all 2000 s lost, all 3600 s to run again.
        pytest.param(0.0, 2000 + 300 + 3600, 2000 * 8, id="no checkpoints lose everything"),
    ],
)
def test_a_failure_rolls_the_whole_gang_back_to_its_last_checkpoint(checkpoint_s: float, end: float,
                                                                     lost_gpu_s: float) -> None:  # fmt: skip
    node = placed(ALONE)[0][0]
    sim = run_failing(ALONE, (2000.0, node, True), checkpoint_s=checkpoint_s)
    assert sim.outcome.end[0] == pytest.approx(end)
    assert stats_of(sim).lost_gpu_s == pytest.approx(lost_gpu_s)
    assert stats_of(sim).resume_s == [300.0]


def test_goodput_is_useful_gpu_hours_over_gpu_hours_held() -> None:
    node = placed(ALONE)[0][0]
    sim = run_failing(ALONE, (2000.0, node, True))
    m = metrics(sim)
    # Held: 8 GPUs from 0 to the end at 4700 s (repaired at once) = 37,600 GPU-s; useful: 8 x 3600 = 28,800.
    assert m["goodput"] == round(28800 / 37600, 4)
    assert m["gpuHoursHeld"] == round(37600 / 3600, 1)
    assert m["gpuHoursLostToFailures"] == round(6400 / 3600, 1)
    assert m["meanJctSeconds"] == 4700.0
    assert (m["failuresInjected"], m["gangsHitByFailures"], m["repairs"], m["failureEvictions"]) == (1, 1, 1, 0)


def test_kilter_repairs_in_the_failed_nodes_domain_where_it_has_room_as_topology_repair_chooses() -> None:
    nodes = placed(ALONE)[0]
    fleet = nvl72(2)
    for n in nodes[1:]:
        fleet.bitmap.allocate(n, 4)
    fleet.bitmap.set_usable(nodes[0], False)
    want = repair.repair(fleet, 0, nodes[1:], [repair.Replacement(4, nodes[0])])
    assert not isinstance(want, str)
    sim = run_failing(ALONE, (2000.0, nodes[0], True))
    assert stats_of(sim).repairs == stats_of(sim).repairs_same_domain == 1
    assert want[0].step == "same-domain"
    assert sim.fleet.node_domain[want[0].node] == sim.fleet.node_domain[nodes[0]]
    assert sim.outcome.domains[0] == 1


def test_kilter_repairs_in_another_domain_when_the_failed_nodes_rack_is_full() -> None:
    node = placed(FULL_RACK)[1][0]
    sim = run_failing(FULL_RACK, (2000.0, node, True))
    assert stats_of(sim).repairs == 1 and stats_of(sim).repairs_same_domain == 0 and stats_of(sim).evictions == 0
    # The gang now spans two racks: its 2400 s of work left run 1.2 times as long (split slowdown 0.2).
    assert sim.outcome.end[1] == pytest.approx(2000 + 300 + 2400 * 1.2)


def test_a_gang_that_requires_one_domain_is_repaired_only_inside_it_as_the_servers_repair() -> None:
    # As above, but the gang requires one scale-up domain: its full rack has no other tray, so rather than leave the
    # rack it waits, keeping its survivor, until its own node returns at 6000 and takes it back (first rung).
    node = placed(FULL_RACK)[1][0]
    fleet = nvl72(2)
    queues = queue_setup([], fleet, Counter(j.queue for j in FULL_RACK))
    config = SimConfig(topology="required", failures=settings())
    clock = Script((2000.0, node, True), (6000.0, node, False))
    sim = build(fleet, FULL_RACK, make_policy("kilter"), queues, config, clock=clock)
    sim.run()
    assert stats_of(sim).repairs == stats_of(sim).repairs_same_domain == 1 and stats_of(sim).evictions == 0
    assert sim.outcome.end[1] == pytest.approx(6000 + 300 + 2400)


def test_kilter_keeps_its_survivors_and_waits_for_room_when_no_node_is_free() -> None:
    # Two racks: the gang, and 64 + 8 GPUs of others filling every other tray; a failure leaves no free node.
    trace = jobs((0, 3600, 8), (0, 9000, 64), (0, 9000, 64), (0, 9000, 8))
    node = placed(trace)[0][0]
    sim = run_failing(trace, (1000.0, node, True), (4000.0, node, False))
    # Repaired when its own node returns at 4000 (first rung), computing at 4300; 3600 - 0 (no checkpoint yet) left.
    assert stats_of(sim).evictions == 0 and stats_of(sim).repairs == stats_of(sim).repairs_same_domain == 1
    assert sim.outcome.end[0] == pytest.approx(4000 + 300 + 3600)
    assert stats_of(sim).resume_s == [3300.0]


def test_kueue_tas_swaps_one_node_within_the_domain() -> None:
    node = placed(ALONE, "kueue-tas")[0][0]
    sim = run_failing(ALONE, (2000.0, node, True), policy="kueue-tas")
    assert (
        stats_of(sim).repairs,
        stats_of(sim).repairs_same_domain,
        stats_of(sim).evictions,
    ) == (1, 1, 0)
    assert sim.outcome.end[0] == pytest.approx(2000 + 300 + 2400)


def test_kueue_tas_evicts_and_requeues_when_the_domain_has_no_room() -> None:
    node = placed(FULL_RACK, "kueue-tas")[1][0]
    sim = run_failing(FULL_RACK, (2000.0, node, True), policy="kueue-tas")
    assert (
        stats_of(sim).repairs,
        stats_of(sim).evictions,
        stats_of(sim).evictions_second_failure,
    ) == (0, 1, 0)
    # Requeued at 2000 and admitted again at once (the other rack is free), from its 1200 s checkpoint; its wait
    # is still that for its first start.
    assert sim.outcome.start[1] == 0.0
    assert sim.outcome.end[1] == pytest.approx(2000 + 300 + 2400)


def test_kueue_tas_evicts_on_a_second_failure_while_a_replacement_is_pending() -> None:
    nodes = placed(ALONE, "kueue-tas")[0]
    # The second pod's node fails 100 s after the first, inside the 300 s restart: evicted, not swapped again.
    sim = run_failing(ALONE, (2000.0, nodes[0], True), (2100.0, nodes[1], True), policy="kueue-tas")
    assert (stats_of(sim).repairs, stats_of(sim).evictions, stats_of(sim).gangs_hit) == (
        1,
        1,
        1,
    )
    assert stats_of(sim).evictions_second_failure == 1
    assert sim.outcome.start[0] == 0.0
    assert sim.outcome.end[0] == pytest.approx(2100 + 300 + 2400)
    assert stats_of(sim).resume_s == [400.0]


def test_kueue_tas_swaps_again_for_a_failure_after_the_gang_resumed() -> None:
    nodes = placed(ALONE, "kueue-tas")[0]
    sim = run_failing(ALONE, (2000.0, nodes[0], True), (2500.0, nodes[1], True), policy="kueue-tas")
    assert (stats_of(sim).repairs, stats_of(sim).evictions, stats_of(sim).gangs_hit) == (
        2,
        0,
        2,
    )


def test_requeue_evicts_the_whole_gang_and_frees_all_its_nodes() -> None:
    node = placed(FULL_RACK)[1][0]
    sim = run_failing(FULL_RACK, (2000.0, node, True), policy="kilter", recovery="requeue")
    assert (stats_of(sim).repairs, stats_of(sim).evictions) == (0, 1)
    assert sim.outcome.start[1] == 0.0 and sim.outcome.end[1] == pytest.approx(2000 + 300 + 2400)
    assert stats_of(sim).lost_gpu_s == pytest.approx(800 * 8)


def test_a_failed_node_is_unusable_until_it_returns() -> None:
    # Job 1 (72 GPUs, a whole rack) must wait for the node that failed in its rack to come back.
    trace = jobs((0, 100, 4), (200, 100, 72))
    node = placed(trace)[0][0]
    sim = run_failing(trace, (50.0, node, True), (1000.0, node, False), fleet=nvl72(1))
    assert sim.outcome.start[1] == 1000.0


def test_seeded_failures_are_the_same_on_every_run_and_differ_between_seeds() -> None:
    trace = jobs(*((i * 300.0, 5000.0, (8, 16, 36, 4)[i % 4]) for i in range(40)))
    config = SimConfig(failures=FailureSettings(node_mtbf_h=20.0, repair_h=1.0, seed=3))
    a, b = (simulate(lambda: nvl72(2), trace, "kilter", config=config) for _ in range(2))
    assert a.metrics == b.metrics
    assert np.array_equal(a.simulation.outcome.end, b.simulation.outcome.end)
    assert a.metrics["failuresInjected"] > 0 and a.metrics["gangsHitByFailures"] > 0
    other = SimConfig(failures=FailureSettings(node_mtbf_h=20.0, repair_h=1.0, seed=4))
    c = simulate(lambda: nvl72(2), trace, "kilter", config=other)
    assert c.metrics["failuresInjected"] != a.metrics["failuresInjected"] or not np.array_equal(
        c.simulation.outcome.end, a.simulation.outcome.end
    )


class Recording(NodeClock):
    """The seeded clock, remembering what it fired."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.fired: list[tuple[float, int, bool]] = []

    def pop(self) -> tuple[float, int, bool]:
        self.fired.append(super().pop())
        return self.fired[-1]


def test_every_policy_sees_the_same_failures_at_the_same_times() -> None:
    trace = jobs(*((i * 300.0, 5000.0, (8, 16, 36, 4)[i % 4]) for i in range(40)))
    fired = []
    for policy in ("kilter", "kueue-tas", "first-fit"):
        fleet = nvl72(2)
        config = SimConfig(failures=FailureSettings(node_mtbf_h=20.0, repair_h=1.0))
        assert config.failures is not None
        clock = Recording(fleet.bitmap.node_usable_flags != 0, config.failures)
        queues = queue_setup([], fleet, Counter(j.queue for j in trace))
        sim = build(fleet, trace, make_policy(policy), queues, config, clock=clock)
        sim.run()
        assert failures_of(sim).recovery == {"kilter": "kilter", "kueue-tas": "kueue-tas"}.get(policy, "requeue")
        fired.append(clock.fired)
    n = min(len(f) for f in fired)
    assert n > 4
    assert fired[0][:n] == fired[1][:n] == fired[2][:n]


def test_node_clock_alternates_failure_and_return_after_the_repair_time_and_skips_unusable_nodes() -> None:
    usable = np.array([True, False, True])
    clock = NodeClock(usable, FailureSettings(node_mtbf_h=1.0, repair_h=2.0, seed=1))
    seen: dict[int, list[tuple[float, bool]]] = {}
    for _ in range(40):
        t, node, fails = clock.pop()
        seen.setdefault(node, []).append((t, fails))
    assert set(seen) == {0, 2}
    for events in seen.values():
        assert [f for _, f in events] == [i % 2 == 0 for i in range(len(events))]
        returns = [t - events[i - 1][0] for i, (t, f) in enumerate(events) if not f]
        assert returns == pytest.approx([7200.0] * len(returns))


def test_without_failures_the_failing_simulation_gives_the_plain_simulations_results() -> None:
    trace = jobs(*((i * 300.0, 5000.0, (8, 16, 36, 4, 72)[i % 5]) for i in range(60)))
    plain = simulate(lambda: nvl72(2), trace, "kilter")
    failing = run_failing(trace, checkpoint_s=600.0)  # a script with no events: nodes never fail
    for field in ("start", "end", "run", "domains"):
        assert np.array_equal(getattr(plain.simulation.outcome, field), getattr(failing.outcome, field))
    m = metrics(failing)
    assert {k: m[k] for k in plain.metrics} == plain.metrics
    assert m["failuresInjected"] == 0 and m["gpuHoursLostToFailures"] == 0.0
    assert "goodput" not in plain.metrics


def test_under_volcano_admission_a_requeued_gang_goes_back_through_the_session_and_resumes() -> None:
    # As under Kueue's cycles: evicted at 2000 with 800 s since its 1200 s checkpoint, the 8-GPU gang is enqueued and
    # allocated again at once (its queue's charge went with it), restarts for 300 s and has 2400 s left.
    node = placed(FULL_RACK)[1][0]
    sim = run_failing(FULL_RACK, (2000.0, node, True), policy="kilter", recovery="requeue", quota="volcano")
    assert (stats_of(sim).repairs, stats_of(sim).evictions) == (0, 1)
    assert sim.outcome.start[1] == 0.0 and sim.outcome.end[1] == pytest.approx(2000 + 300 + 2400)
    assert stats_of(sim).lost_gpu_s == pytest.approx(800 * 8)
    # kilter's repair keeps the gang's quota under Volcano too: its lost pod goes to the other rack (its own is full),
    # the gang is never requeued and runs its 2400 s left 1.2 times as long (split slowdown 0.2).
    sim = run_failing(FULL_RACK, (2000.0, node, True), policy="kilter", quota="volcano")
    assert (stats_of(sim).repairs, stats_of(sim).repairs_same_domain, stats_of(sim).evictions) == (1, 0, 0)
    assert sim.outcome.end[1] == pytest.approx(2000 + 300 + 2400 * 1.2)


def test_a_job_that_only_fits_a_fleet_with_no_node_down_does_not_keep_the_run_going_forever() -> None:
    # One rack; the 72-GPU job needs every tray, and from t=20 on some tray is always down (each down for 80 s, one
    # failing every 50 s): it never starts, and the run ends a repair time (1 h) after the fleet fell idle.
    trace = jobs((0, 100, 4), (10, 100, 72))
    events = [(20.0 + 50 * k, k % 18, True) for k in range(2000)]
    events += [(100.0 + 50 * k, k % 18, False) for k in range(2000)]
    sim = run_failing(trace, *events, fleet=nvl72(1), repair_h=1.0)
    assert not np.isnan(sim.outcome.end[0]) and np.isnan(sim.outcome.start[1])
    assert sim.timeline.present_s < 100 * 1000


def test_a_requeued_gang_leaves_no_stale_end_behind_to_stretch_the_run() -> None:
    # The 8-GPU gang is requeued at 2000 and ends at 4700; the engine first booked its end at 3600 for a fresh
    # start at 2000 (5600): the run, and its time present, end at 4700 all the same.
    node = placed(ALONE)[0][0]
    sim = run_failing(ALONE, (2000.0, node, True), recovery="requeue")
    assert sim.outcome.end[0] == pytest.approx(4700.0)
    assert sim.timeline.present_s == pytest.approx(4700.0)


def test_kilter_replan_repairs_in_the_gangs_domains_and_requeues_rather_than_add_one() -> None:
    nodes = placed(ALONE)[0]
    sim = run_failing(ALONE, (2000.0, nodes[0], True), recovery="kilter-replan")
    assert (
        stats_of(sim).repairs,
        stats_of(sim).repairs_same_domain,
        stats_of(sim).evictions,
    ) == (1, 1, 0)
    node = placed(FULL_RACK)[1][0]
    sim = run_failing(FULL_RACK, (2000.0, node, True), recovery="kilter-replan")
    assert (stats_of(sim).repairs, stats_of(sim).evictions) == (0, 1)
    # Planned again whole in the free rack: one domain, no slowdown, from its 1200 s checkpoint.
    assert sim.outcome.domains[1] == 1 and sim.outcome.end[1] == pytest.approx(2000 + 300 + 2400)


def test_a_repair_may_take_the_rack_spare_that_new_plans_leave_alone() -> None:
    fleet = nvl72(1)
    spares.assign(fleet, [1])  # one spare: the rack's highest-indexed idle tray
    # 17 trays run an hour; a one-tray job at 50 s may not take the 18th (the spare) and waits. Tray 3 fails at
    # 100 s: the repair takes the spare, and the small job waits for the gang's end at 4,000 s.
    trace = jobs((0, 3600, 68), (50, 100, 4))
    sim = run_failing(trace, (100.0, 3, True), fleet=fleet)
    assert stats_of(sim).repairs == stats_of(sim).repairs_same_domain == 1 and stats_of(sim).evictions == 0
    assert sim.outcome.domains[0] == 1 and sim.outcome.end[0] == pytest.approx(100 + 300 + 3600)
    assert sim.outcome.start[1] == pytest.approx(4000.0)

"""The simulator's rules: whole gangs, capacity never exceeded, queue order, waiting, and the price of splitting."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from kilter.sim import fleetspec
from kilter.sim.compose import build
from kilter.sim.engine import SimConfig, Simulation
from kilter.sim.gangs import Gang
from kilter.sim.metrics import metrics
from kilter.sim.placement import Nodes, PlacementPolicy
from kilter.sim.policies import make_policy
from kilter.sim.queues import queue_setup
from kilter.sim.trace import TraceJob
from kilter.topology.fleet import Fleet
from tests.sim.conftest import jobs, nvl72


def simulate(
    fleet: Fleet, trace: list[TraceJob], policy: str | PlacementPolicy = "kilter", **config: Any
) -> Simulation:
    queues = queue_setup([], fleet, Counter(j.queue for j in trace))
    chosen = make_policy(policy) if isinstance(policy, str) else policy
    sim = build(fleet, trace, chosen, queues, SimConfig(**config))
    sim.run()
    return sim


def gpus_in_use_at(sim: Simulation, t: float) -> int:
    o = sim.outcome
    gpus = np.array([j.gpus for j in sim.jobs])
    running = (o.start <= t) & (o.end > t)
    return int(gpus[running].sum())


class Recorder:
    """A policy that remembers what the wrapped one answered."""

    def __init__(self, inner: PlacementPolicy) -> None:
        self.inner = inner
        self.name = inner.name
        self.answers: list[tuple[Gang, Nodes]] = []

    def place(self, fleet: Fleet, gang: Gang) -> Nodes | None:
        nodes = self.inner.place(fleet, gang)
        if nodes is not None:
            self.answers.append((gang, nodes.copy()))
        return nodes


def test_a_job_waits_until_every_pod_of_its_gang_fits() -> None:
    fleet = nvl72(1)  # 18 trays x 4 = 72 GPUs
    sim = simulate(fleet, jobs((0, 100, 64), (10, 50, 16)))
    # 64 + 16 > 72: the second gang cannot start until the first ends at t=100.
    assert sim.outcome.start.tolist() == [0.0, 100.0]
    assert sim.outcome.end.tolist() == [100.0, 150.0]


def test_gpus_in_use_never_exceed_the_usable_gpus() -> None:
    rng = np.random.default_rng(3)
    rows = [
        (float(t), float(d), int(g))
        for t, d, g in zip(
            np.sort(rng.uniform(0, 2000, 300)),
            rng.uniform(10, 400, 300),
            rng.choice([1, 2, 4, 8, 16, 32], 300),
            strict=True,
        )
    ]
    fleet = nvl72(2, unhealthy=5)
    usable = int(fleet.bitmap.domain_usable_gpus.sum())
    sim = simulate(fleet, jobs(*rows))
    starts = sorted(set(sim.outcome.start[~np.isnan(sim.outcome.start)].tolist()))
    assert max(gpus_in_use_at(sim, t) for t in starts) <= usable
    assert np.isnan(sim.outcome.start).sum() == 0


def test_unhealthy_nodes_hold_nothing_under_every_policy() -> None:
    rows = [(float(i * 5), 300.0, g) for i, g in enumerate([4, 8, 16, 2, 1, 32, 4, 4, 8] * 6)]
    for name in ("kilter", "kueue-tas", "volcano-binpack", "spread", "first-fit"):
        fleet = nvl72(2, unhealthy=9, seed=4)
        recorder = Recorder(make_policy(name))
        simulate(fleet, jobs(*rows), recorder)
        usable = fleet.bitmap.node_usable_flags
        assert recorder.answers, name
        for gang, nodes in recorder.answers:
            assert usable[nodes].all(), (name, gang)


def test_jobs_of_one_size_start_in_submit_order() -> None:
    fleet = nvl72(1)
    sim = simulate(fleet, jobs(*[(float(i), 100.0, 32) for i in range(6)]))
    # Two 32-GPU jobs fit at a time (72 GPUs): pairs start at 0 (the second at 1), 100, 101, 200, 201.
    assert sim.outcome.start.tolist() == [0.0, 1.0, 100.0, 101.0, 200.0, 201.0]


def test_a_waiting_big_job_does_not_block_smaller_ones_behind_it() -> None:
    fleet = nvl72(1)
    sim = simulate(fleet, jobs((0, 100, 40), (1, 100, 40), (2, 10, 8)))
    # 40 + 40 > 72, so job 1 waits for job 0; job 2 (8 GPUs) fits beside job 0 at once (BestEffortFIFO).
    assert sim.outcome.start.tolist() == [0.0, 100.0, 2.0]


def test_a_job_that_can_never_fit_is_reported_and_the_rest_run() -> None:
    fleet = nvl72(1)
    sim = simulate(fleet, jobs((0, 10, 4), (1, 10, 100), (2, 10, 4)))
    assert list(sim.outcome.never) == [1]
    assert "100 GPUs" in sim.outcome.never[1]
    m = metrics(sim)
    assert (m["jobs"], m["completed"], m["neverFit"]) == (3, 2, 1)


def test_a_required_gang_bigger_than_a_domain_never_fits() -> None:
    fleet = nvl72(2)
    sim = simulate(fleet, jobs((0, 10, 80)), topology="required")
    assert list(sim.outcome.never) == [0]
    sim = simulate(nvl72(2), jobs((0, 10, 80)), topology="preferred")
    assert sim.outcome.never == {}
    assert sim.outcome.domains.tolist() == [2]


def test_a_gang_split_over_more_domains_than_it_needs_runs_longer() -> None:
    fleet = nvl72(2, per_block=1)  # two domains in two blocks
    # Job 0 (10 trays) and job 1 (10 trays) take a domain each; job 2 (64 GPUs = 16 trays) finds 8 trays
    # free in each and, preferred, is split over 2 domains though 1 could hold it: 1 extra domain and an
    # avoidable block crossing, so it runs 100 x (1 + 0.2 x 1 + 0.1) = 130 s.
    sim = simulate(fleet, jobs((0, 1000, 40), (0, 1000, 40), (1, 100, 64)))
    o = sim.outcome
    assert o.domains[2] == 2 and o.min_domains[2] == 1 and o.crossed_block[2]
    assert o.run[2] == pytest.approx(130.0)
    assert o.end[2] == pytest.approx(1 + 130.0)
    m = metrics(sim)
    assert m["usefulUtilization"] < m["utilization"]  # the 30 s lost to the split count as busy, not useful


def test_no_slowdown_when_the_price_is_zero() -> None:
    fleet = nvl72(2, per_block=1)
    sim = simulate(fleet, jobs((0, 1000, 40), (0, 1000, 40), (1, 100, 64)), split_slowdown=0.0, block_slowdown=0.0)
    assert sim.outcome.run[2] == pytest.approx(100.0)
    m = metrics(sim)
    assert m["usefulUtilization"] == m["utilization"]


def test_kilter_keeps_a_gang_in_one_domain_where_first_fit_splits_it() -> None:
    trace = jobs((0, 1000, 12), (1, 100, 64))
    # first-fit puts job 0 on the first three trays of domain 0, then job 1 (16 trays) on the other 15
    # trays of domain 0 and one of domain 1; kilter keeps job 1 whole in the untouched domain 1.
    ff = simulate(nvl72(2), trace, "first-fit").outcome
    kt = simulate(nvl72(2), trace, "kilter").outcome
    assert ff.domains[1] == 2
    assert kt.domains[1] == 1


def test_the_same_inputs_give_the_same_outcome() -> None:
    rng = np.random.default_rng(9)
    rows = [
        (float(t), float(d), int(g))
        for t, d, g in zip(
            np.sort(rng.uniform(0, 500, 120)), rng.uniform(10, 200, 120), rng.choice([1, 4, 8, 16], 120), strict=True
        )
    ]
    a = simulate(nvl72(2, unhealthy=3, seed=2), jobs(*rows), "spread")
    b = simulate(nvl72(2, unhealthy=3, seed=2), jobs(*rows), "spread")
    assert np.array_equal(a.outcome.start, b.outcome.start, equal_nan=True)
    assert metrics(a) == metrics(b)


def two_teams(preemption: dict[str, str] | None) -> list[dict[str, Any]]:
    """Teams a and b, 36 GB200 GPUs each, in one cohort."""

    def team(name: str) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "cohortName": "co",
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "gb200-nvl72", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 36}]}],
                }
            ],
        }
        if preemption:
            spec["preemption"] = preemption
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": spec,
        }

    return [team("a"), team("b")]


def run_teams(objects: list[dict[str, Any]], *, fair: bool) -> Simulation:
    # a fills the whole 72-GPU domain at t=0 (borrowing b's 36); b asks for 16 GPUs at t=10.
    trace = jobs(*[(0, 1000, 4, "a")] * 18, *[(10, 100, 4, "b")] * 4)
    fleet = nvl72(1)
    queues = queue_setup(objects, fleet, Counter(j.queue for j in trace))
    sim = build(fleet, trace, make_policy("kilter"), queues, SimConfig(fair=fair))
    sim.run()
    return sim


@pytest.mark.parametrize("fair", [True, False])
def test_a_queue_within_its_nominal_quota_reclaims_what_another_borrowed(fair: bool) -> None:
    sim = run_teams(two_teams({"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"}), fair=fair)
    o = sim.outcome
    # b's 4 jobs start at once; 4 of a's jobs are evicted and start again when b's end at 110.
    assert o.start[18:].tolist() == [10.0] * 4
    assert sim.preemptions == 4
    restarted = o.start[:18] == 110.0
    assert restarted.sum() == 4
    assert metrics(sim)["preemptions"] == 4
    assert metrics(sim)["completed"] == 22


def test_without_a_preemption_policy_the_queue_waits_for_the_borrowed_gpus() -> None:
    sim = run_teams(two_teams(None), fair=True)
    assert sim.outcome.start[18:].tolist() == [1000.0] * 4
    assert sim.preemptions == 0


def test_under_preemption_every_job_still_runs_to_the_end_exactly_once() -> None:
    from kilter.cli.demo_compare import demo_objects
    from kilter.cli.sources import DEMO_QUEUES
    from kilter.sim import synthetic
    from kilter.sim.fleetspec import fleet_from_objects
    from kilter.state import snapshot

    # The demo cluster's queues (reclaimWithinCohort: Any, a lending limit, a 2h min-runtime) under load, with
    # spreading: gangs are evicted and queued again, sometimes ahead of the job that evicted them.
    trace = synthetic.generate("philly", jobs=3000, seed=0, gpu_scale=4)
    fleet = fleet_from_objects(demo_objects())
    queues = queue_setup(snapshot.load_documents(DEMO_QUEUES), fleet, Counter(j.queue for j in trace))
    sim = build(fleet, trace, make_policy("spread"), queues, SimConfig(fair=True))
    sim.run()
    assert sim.preemptions > 0
    assert not np.isnan(sim.outcome.end).any()
    assert (sim.outcome.end >= sim.outcome.start).all()
    assert int(fleet.bitmap.node_used_gpus.sum()) == 0  # everything booked was given back
    assert all(not n.usage.get(fr) for n in queues.tree.cluster_queues.values() for fr in n.quotas)


class Refusing:
    """kilter's placement, refusing the jobs in ``refuse`` on a busy fleet; remembers what it was told of releases."""

    name = "refusing"

    def __init__(self, refuse: set[int]) -> None:
        self.inner = make_policy("kilter")
        self.refuse = refuse
        self.released: list[int] = []
        self.restored: list[int] = []

    def place(self, fleet: Fleet, gang: Gang) -> Nodes | None:
        busy = int(fleet.bitmap.node_used_gpus.sum()) > 0
        return None if gang.job in self.refuse and busy else self.inner.place(fleet, gang)

    def release(self, job: int) -> None:
        self.released.append(job)

    def restore(self, job: int) -> None:
        self.restored.append(job)


def test_a_preemption_whose_gang_would_not_place_evicts_nothing_and_restores_what_it_tried() -> None:
    trace = jobs(*[(0, 1000, 4, "a")] * 18, (10, 100, 4, "b"))
    fleet = nvl72(1)
    policy = Refusing({18})  # b's job never places, even on what a's jobs would free
    objects = two_teams({"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"})
    sim = build(fleet, trace, policy, queue_setup(objects, fleet, Counter(j.queue for j in trace)), SimConfig())
    sim.run()
    assert sim.preemptions == 0
    assert sim.outcome.start[:18].tolist() == [0.0] * 18  # a's jobs ran undisturbed
    # The what-if released a job of a's, found b's gang still would not place, and put it back.
    assert policy.restored and all(j < 18 for j in policy.restored)
    assert sim.outcome.start[18] == 1000.0  # b's job starts once a's jobs end and the fleet is idle


def cluster_queue(name: str, flavors: list[tuple[str, str, int]], *, cohort: str = "") -> dict[str, Any]:
    """A ClusterQueue with one resource group per (flavor, resource, nominal), in order."""
    spec: dict[str, Any] = {
        "resourceGroups": [
            {"coveredResources": [r], "flavors": [{"name": f, "resources": [{"name": r, "nominalQuota": n}]}]}
            for f, r, n in flavors
        ]
    }
    if cohort:
        spec["cohortName"] = cohort
        spec["preemption"] = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


class Bounded:
    """kilter's placement, failing the test instead of hanging once it was asked ``limit`` times."""

    name = "bounded"

    def __init__(self, limit: int) -> None:
        self.inner = make_policy("kilter")
        self.left = limit

    def place(self, fleet: Fleet, gang: Gang) -> Nodes | None:
        self.left -= 1
        assert self.left >= 0, "the simulation keeps placing at one instant"
        return self.inner.place(fleet, gang)


def test_a_job_evicted_at_an_instant_preempts_no_one_until_the_clock_moves() -> None:
    # tests/quota/test_preempt.py's two workloads that Kueue's rules let evict each other, on a fleet: one GB200
    # rack (72 GPUs, llm and vision 36 each) and two MI355X nodes (serve's 8 GPUs, all borrowed by vision's job 20;
    # solo's 8, in no cohort).
    gb, mi = ("gb200-nvl72", "nvidia.com/gpu"), ("mi355x-8", "amd.com/gpu")
    objects = [
        cluster_queue("llm", [(*gb, 36)], cohort="co"),
        cluster_queue("vision", [(*gb, 36), (*mi, 0)], cohort="co"),
        cluster_queue("serve", [(*mi, 8)], cohort="co"),
        cluster_queue("solo", [(*mi, 8)]),
    ]
    trace = jobs(
        *[(0, 1000, 4, "llm")] * 8,  # 0-7: llm holds 32
        *[(0, 1000, 4, "vision")] * 8,  # 8-15: vision holds 32
        (0, 10, 8, "solo"),  # 16: its end at 10 lets 17 and 18 try again then
        (0, 1000, 16, "llm"),  # 17 and 18 wait: nothing of vision's is a candidate while vision is within nominal
        (0, 1000, 12, "llm"),
        (1, 1000, 8, "llm"),  # 19 = x: llm borrows 4, the rack is full
        (2, 1000, 8, "vision"),  # 20: no room on the rack, so it borrows serve's MI355X GPUs
        (10, 100, 4, "vision"),  # 21 = w, within vision's nominal: reclaims x
        (10, 100, 4, "vision"),  # 22 = y: fits in what x left, so vision borrows 4 on the rack
    )
    fleet = fleetspec.fleet_from_spec(
        fleetspec.parse_spec(
            {"platforms": [{"platform": "GB200-NVL72", "domains": 1}, {"platform": "MI355X-8", "nodes": 2}]}, seed=0
        )
    )
    queues = queue_setup(objects, fleet, Counter(j.queue for j in trace))
    sim = build(fleet, trace, Bounded(500), queues, SimConfig(fair=True))
    sim.run()
    o = sim.outcome
    # At 10 x would take w and y back (Kueue's rules allow it) and w would reclaim x again, forever: x, evicted at
    # 10, may not preempt before the clock moves. w and y run to their end; x starts again on what they free.
    assert o.start[20:].tolist() == [2.0, 10.0, 10.0]
    assert o.end[21:].tolist() == [110.0, 110.0]
    assert o.start[19] == 110.0
    assert sim.preemptions == 1
    assert not np.isnan(o.end).any()


def test_the_timeline_counts_the_jobs_waiting_at_each_sample() -> None:
    trace = jobs(*[(float(i), 100.0, 32) for i in range(6)])
    sim = simulate(nvl72(1), trace)
    tl, o = sim.timeline, sim.outcome
    submit = np.array([j.submit_s for j in trace])
    expected = [int(((submit <= t) & (o.start > t)).sum()) for t in tl.times]
    assert len(tl.times) > 3 and tl.waiting == expected and max(expected) == 4

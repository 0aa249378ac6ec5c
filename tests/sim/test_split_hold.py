"""The split-wait rule in the simulator: a preferred gang waits for fewer domains, within its budget; kilter only."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kilter.model.errors import InputError
from kilter.sim import fleetspec, synthetic
from kilter.sim.compose import build
from kilter.sim.engine import SimConfig, Simulation
from kilter.sim.gangs import Gang, gang_for
from kilter.sim.metrics import metrics
from kilter.sim.placement import Nodes
from kilter.sim.policies import make_policy
from kilter.sim.queues import queue_setup
from kilter.sim.split_hold import SplitHold, WaitSettings
from kilter.sim.stall import Stalled
from kilter.sim.trace import TraceJob
from kilter.state import snapshot
from kilter.topology import split_wait
from kilter.topology.fleet import Fleet
from kilter.topology.split_wait import fewest_domains_idle
from tests.sim.conftest import jobs, nvl72
from tests.sim.test_engine import run_teams, two_teams

DOCS = Path(__file__).resolve().parents[2] / "docs" / "sim"
ORACLE = WaitSettings(runtime_estimate="oracle")


def simulate(trace: list[TraceJob], policy: Any = "kilter", *, fleet: Fleet | None = None, **config: Any) -> Simulation:
    fleet = fleet or nvl72(2)
    config.setdefault("split_wait", ORACLE)
    queues = queue_setup([], fleet, Counter(j.queue for j in trace))
    chosen = make_policy(policy) if isinstance(policy, str) else policy
    sim = build(fleet, trace, chosen, queues, SimConfig(**config))
    sim.run()
    return sim


def crowded(a_ends: float, *rest: tuple[float, float, int]) -> list[TraceJob]:
    """Jobs 0 and 1 take 10 trays of each rack (0 until ``a_ends``, 1 until 5000); job 2 (16 trays, 1000 s) comes
    at t=1 and finds 8 trays free in each rack: its best plan is split over 2 racks though 1 could hold it."""
    return jobs((0, a_ends, 40), (0, 5000, 40), (1, 1000, 64), *rest)


def test_a_gang_waits_for_a_finish_that_frees_one_domain_and_starts_whole() -> None:
    sim = simulate(crowded(100))
    o = sim.outcome
    # budget = 1 x 0.2 x 1 extra domain x 1000 s = 200 s; job 0 ends at t=100, within it.
    assert o.start[2] == 100.0 and o.domains[2] == 1 and o.end[2] == 1100.0
    m = metrics(sim)
    assert (m["splitWaited"], m["splitWaitMeanSeconds"], m["splitWaitTookSplit"]) == (1, 99.0, 0)
    plain = simulate(crowded(100), split_wait=WaitSettings(factor=0))
    # Without waiting it starts at once on 2 racks and runs 1000 x (1 + 0.2) = 1200 s: it ends 101 s later.
    assert plain.outcome.start[2] == 1.0 and plain.outcome.domains[2] == 2 and plain.outcome.end[2] == 1201.0


TOLD_025 = WaitSettings(runtime_estimate="oracle", split_slowdown=0.25)


def test_when_the_budget_runs_out_the_gang_starts_split_at_exactly_submit_plus_budget() -> None:
    # Priced by its own slowdown alone: job 3, queued behind it, would otherwise make the split dearer.
    own = WaitSettings(runtime_estimate="oracle", split_slowdown=0.25, price="own")
    sim = simulate(crowded(10_000, (2, 10, 32)), split_wait=own)
    o = sim.outcome
    # budget = 1 x 0.25 x 1 x 1000 s = 250 s from t=1: no finish comes in time, a timer wakes it at t=251.
    # (Job 3, behind it, found no quota while job 2 kept it; that does not stop job 2 itself at t=251.)
    assert o.start[2] == 251.0 and o.domains[2] == 2
    assert metrics(sim)["splitWaitTookSplit"] == 1


@pytest.mark.parametrize(
    ("sim_slowdown", "told", "start"),
    [
        pytest.param(0.25, 0.2, 201.0, id="the rule prices a split as kilter was told (0.2 x 1000 s), not as it runs"),
        pytest.param(0.5, 0.2, 201.0, id="a dearer true split changes nothing the rule sees"),
        pytest.param(0.5, None, 501.0, id="handed the true price on request: 0.5 x 1000 s"),
    ],
)
def test_the_rule_knows_only_the_split_slowdown_an_operator_set(
    sim_slowdown: float, told: float | None, start: float
) -> None:
    settings = WaitSettings(runtime_estimate="oracle", split_slowdown=told)
    sim = simulate(crowded(10_000), split_slowdown=sim_slowdown, split_wait=settings)
    assert sim.outcome.start[2] == start and sim.outcome.domains[2] == 2
    # It runs as long as the simulation's own price says: 1000 x (1 + slowdown).
    assert sim.outcome.run[2] == pytest.approx(1000 * (1 + sim_slowdown))


def test_the_cap_bounds_every_wait() -> None:
    sim = simulate(crowded(10_000), split_wait=WaitSettings(factor=10, max_s=60, runtime_estimate="oracle"))
    assert sim.outcome.start[2] == 61.0  # 10 x 0.2 x 1000 = 2000 s, capped at 60 s


def test_a_held_gang_bounds_nothing_a_larger_job_behind_it_may_still_start() -> None:
    # Job 2 (10 trays) would split over the 8 + 8 free trays and waits (budget 200 s). Job 3 (12 trays, 1 s)
    # is larger, yet it fits too (8 + 4): had job 2's wait counted as "did not fit", no job of 10 trays or more
    # would be tried until a gang ended (t=100). Its own budget, 0.2 x 1 x 1 s, runs out at t=2.2.
    # (Priced by its own slowdown: job 2 waiting all along job 3's 1 s run would make job 3 wait for the queue.)
    trace = jobs((0, 100, 40), (0, 5000, 40), (1, 1000, 40), (2, 1, 48))
    sim = simulate(trace, split_wait=WaitSettings(runtime_estimate="oracle", holds="nothing", price="own"))
    assert sim.outcome.start[3] == pytest.approx(2.2) and sim.outcome.domains[3] == 2
    assert sim.outcome.start[2] == 100.0 and sim.outcome.domains[2] == 1


def test_a_held_gang_keeps_its_quota_so_the_jobs_behind_it_cannot_take_its_room() -> None:
    trace = crowded(100, (2, 10, 4))
    # The one ClusterQueue holds 144 GPUs: 80 running + 64 reserved by the waiting gang leave none for job 3,
    # which starts when job 2 does.
    kept = simulate(trace)
    assert kept.outcome.start.tolist() == [0.0, 0.0, 100.0, 100.0]
    # Holding nothing, job 3 goes ahead at once (BestEffortFIFO) on a free tray.
    freed = simulate(trace, split_wait=WaitSettings(runtime_estimate="oracle", holds="nothing"))
    assert freed.outcome.start.tolist() == [0.0, 0.0, 100.0, 2.0]
    for sim in (kept, freed):
        assert not any(n.usage.get(fr) for n in sim.queues.tree.cluster_queues.values() for fr in n.quotas)


def test_the_budget_counts_from_the_first_hold_or_from_submission() -> None:
    # Jobs 2 and 3 fill the 8 free trays of each rack until t=50; job 4 first fits, split, at t=50.
    # Its budget (0.25 x 400 = 100 s) runs from t=50 to 150, past job 0's end at t=120: it starts whole there.
    trace = jobs((0, 120, 40), (0, 5000, 40), (0, 50, 32), (0, 50, 32), (1, 400, 64))
    held = simulate(trace, split_wait=TOLD_025)
    assert held.outcome.start[4] == 120.0 and held.outcome.domains[4] == 1
    # Counted from submission at t=1, 49 s are spent by t=50: it takes the split plan at t=101.
    settings = WaitSettings(runtime_estimate="oracle", clock="submit", split_slowdown=0.25)
    submitted = simulate(trace, split_wait=settings)
    assert submitted.outcome.start[4] == 101.0 and submitted.outcome.domains[4] == 2


def test_required_gangs_never_wait_for_the_rule() -> None:
    sim = simulate(crowded(10_000), topology="required")
    assert sim.outcome.start[2] == 5000.0  # it waits for a whole rack (job 1's), as required gangs always did
    assert metrics(sim)["splitWaited"] == 0


class Renamed:
    """kilter's placement under another name: what the engine did before the rule existed."""

    name = "kilter-as-before"

    def __init__(self) -> None:
        self.inner = make_policy("kilter")

    def place(self, fleet: Fleet, gang: Gang) -> Nodes | None:
        return self.inner.place(fleet, gang)


def test_factor_0_or_no_estimate_or_another_policy_changes_nothing() -> None:
    trace = synthetic.generate("philly", jobs=800, seed=4, gpu_scale=8)
    fleet = nvl72(3, unhealthy=2)
    before = simulate(trace, Renamed(), fleet=fleet).outcome
    waiting = simulate(trace, fleet=nvl72(3, unhealthy=2), split_wait=WaitSettings()).outcome
    assert not np.array_equal(before.start, waiting.start, equal_nan=True)  # the rule does act on this trace
    for settings in (WaitSettings(factor=0), WaitSettings(runtime_estimate="none"), WaitSettings(max_s=0)):
        sim = simulate(trace, fleet=nvl72(3, unhealthy=2), split_wait=settings)
        assert sim.hold is None
        assert np.array_equal(sim.outcome.start, before.start, equal_nan=True)
        assert np.array_equal(sim.outcome.domains, before.domains)
    assert simulate(trace, "kueue-tas", fleet=nvl72(3, unhealthy=2)).hold is None


def test_the_learner_hears_only_of_runs_that_ended() -> None:
    sim = run_teams(two_teams({"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"}), fair=False)
    assert sim.preemptions == 4 and sim.hold is not None
    learner = sim.hold.estimates.learner
    # 22 jobs ended once each; the 4 evicted runs (10 s each) taught it nothing.
    assert len(learner) == 22
    assert learner.estimate("a", 4) == 1000.0 and learner.estimate("b", 4) == 100.0


def test_the_learned_estimate_lets_a_gang_wait_once_its_queue_has_history() -> None:
    # Job 2 ends after 300 s; then job 3 meets the split job 2 of crowded() meets. Learned: 300 s (its size
    # class has no history; its queue's median over all sizes is 300 s), so its budget is 0.2 x 300 = 60 s.
    trace = jobs((0, 1000, 40), (0, 5000, 40), (0, 300, 4), (400, 1000, 64))
    sim = simulate(trace, split_wait=WaitSettings())
    o = sim.outcome
    assert o.domains[3] == 2 and o.start[3] == 460.0
    assert metrics(sim)["splitWaited"] == 1


def test_the_same_trace_gives_the_same_waits() -> None:
    trace = synthetic.generate("philly", jobs=1500, seed=1, gpu_scale=8)
    a = simulate(trace, fleet=nvl72(4, unhealthy=3, seed=2), split_wait=WaitSettings(runtime_estimate="declared"))
    b = simulate(trace, fleet=nvl72(4, unhealthy=3, seed=2), split_wait=WaitSettings(runtime_estimate="declared"))
    assert metrics(a)["splitWaited"] > 0
    assert np.array_equal(a.outcome.start, b.outcome.start, equal_nan=True)
    assert metrics(a) == metrics(b)


def test_under_volcano_quota_a_held_gang_stays_enqueued_and_starts_whole() -> None:
    fleet = nvl72(2)
    trace = crowded(100)
    queues = queue_setup([], fleet, Counter(j.queue for j in trace))
    config = SimConfig(quota="volcano", fair=True, split_wait=ORACLE)
    sim = build(fleet, trace, make_policy("kilter"), queues, config)
    sim.run()
    assert sim.outcome.start[2] == 100.0 and sim.outcome.domains[2] == 1


@pytest.mark.parametrize("fleet_file", ["gb200-40.yaml", "gb200-48.yaml"])
def test_the_idle_fleet_minimum_is_the_simulators_minimum_for_every_trace_gang(fleet_file: str) -> None:
    doc = snapshot.load_documents(DOCS / fleet_file)[0]
    fleet = fleetspec.fleet_from_spec(fleetspec.parse_spec(doc, seed=0))
    platform = fleet.platforms[0]
    for gpus in range(4, 4 * 128 + 1, 2):  # Philly's 1-128 GPUs, x4; odd halves give gangs of two pod shapes
        gang = gang_for(0, gpus, platform, 0, "preferred")
        assert fewest_domains_idle(fleet, 0, gang.pod_sets) == platform.unsplit_domains(gang.pods), gpus


def test_queue_annotations_set_the_rule_per_cluster_queue_nearest_first() -> None:
    objects: list[dict[str, Any]] = two_teams(None)
    objects[0]["metadata"]["annotations"] = {"kilter.dev/split-wait": "0"}
    objects.append(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Cohort",
            "metadata": {
                "name": "co",
                "annotations": {"kilter.dev/split-wait": "2", "kilter.dev/split-wait-max": "1h"},
            },
        }
    )
    fleet = nvl72(1)
    queues = queue_setup(objects, fleet, Counter({"a": 1, "b": 1}))
    assert queues.split_wait == {"a": (0.0, 3600.0), "b": (2.0, 3600.0)}
    objects[1]["metadata"]["annotations"] = {"kilter.dev/split-wait-max": "soon"}
    with pytest.raises(InputError, match="ClusterQueue b"):
        queue_setup(objects, fleet, Counter({"a": 1, "b": 1}))


def test_a_queue_whose_annotation_turns_waiting_off_does_not_wait() -> None:
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "default", "annotations": {"kilter.dev/split-wait": "0"}},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {"name": "gb200-nvl72", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 144}]}
                        ],
                    }
                ]
            },
        }
    ]
    fleet = nvl72(2)
    trace = crowded(100)
    queues = queue_setup(objects, fleet, Counter(j.queue for j in trace))
    sim = build(fleet, trace, make_policy("kilter"), queues, SimConfig(split_wait=ORACLE))
    sim.run()
    assert sim.hold is None and sim.outcome.start[2] == 1.0


def test_while_jobs_have_queued_all_along_its_run_a_gang_waits_for_its_fewest_domains_holding_no_quota() -> None:
    # Jobs 0 and 1 take 10 trays of each rack; jobs 2-4 want a whole rack each and queue from t=0 until job 0
    # ends at t=3000. Job 5 (16 trays, 1000 s) arrives at t=1000 and would split over the 8 + 8 free trays.
    # Priced by its own slowdown it waits 60 s (the cap), then splits. Priced by the queue, the three jobs that
    # waited all along its expected run say a split would take GPU-time from a queue that outlasts it: it waits
    # for a whole rack (after jobs 2-4, older, have had rack 0 in turn) and keeps no quota meanwhile, so job 6
    # (one tray) starts on arrival instead of behind it.
    trace = jobs((0, 3000, 40), (0, 5000, 40), (0, 10, 72), (0, 10, 72), (0, 10, 72), (1000, 1000, 64), (1001, 10, 4))
    queued = simulate(trace, split_wait=WaitSettings(runtime_estimate="oracle", max_s=60))
    own = simulate(trace, split_wait=WaitSettings(runtime_estimate="oracle", max_s=60, price="own"))
    assert (own.outcome.start[5], own.outcome.domains[5]) == (1060.0, 2)
    assert own.outcome.start[6] > 1060.0  # it kept its quota while it waited, and took the trays job 6 wanted
    assert (queued.outcome.start[5], queued.outcome.domains[5]) == (3030.0, 1)
    assert queued.outcome.start[6] == 1001.0
    assert metrics(queued)["splitWaitTookSplit"] == 0


def test_a_gang_alone_in_the_queue_is_priced_by_its_own_slowdown() -> None:
    # crowded(): job 2 is the only job waiting, so the queue price adds nothing to its own 200 s budget.
    for price in ("queue", "own"):
        sim = simulate(crowded(10_000), split_wait=WaitSettings(runtime_estimate="oracle", price=price))
        assert (sim.outcome.start[2], sim.outcome.domains[2]) == (201.0, 2), price


QUEUED = jobs((0, 3000, 40), (0, 5000, 40), (0, 10, 72), (0, 10, 72), (0, 10, 72), (1000, 1000, 64), (1001, 10, 4))


def test_a_gang_stops_waiting_when_nothing_is_left_running_that_could_make_room(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 8 usable trays a rack: job 1 (12 trays) needs both racks, but the fewest-domains bound says 1 (a bound the
    # plan can never reach, as for gangs of mixed pod shapes or a minimum taken before trays failed). It waits
    # while job 0 runs (its budget: 0.2 x 1000 s); when job 0 ends at t=100 nothing runs that could make room,
    # so it starts then, split, rather than wait out its budget to t=201 (or for ever, were it priced by the queue).
    fleet = nvl72(2)
    for domain in range(2):
        for node in np.flatnonzero(fleet.node_domain == domain)[:10]:
            fleet.bitmap.set_usable(int(node), False)
    monkeypatch.setattr(split_wait, "fewest_domains_idle", lambda *_: 1)
    sim = simulate(jobs((0, 100, 8), (1, 1000, 48)), fleet=fleet)
    assert (sim.outcome.start[1], sim.outcome.domains[1]) == (100.0, 2)
    assert metrics(sim)["splitWaited"] == 1


def test_a_run_whose_held_gangs_could_never_start_ends_in_an_error_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    # The QUEUED trace's job 5 waits for the queue's sake; were it never planned again (the bug this guards
    # against: a bound that stays false), the run would loop for ever once nothing else is left.
    monkeypatch.setattr(SplitHold, "_hopeless", lambda self, gang, room: True)
    with pytest.raises(Stalled, match=r"the simulation stalled: .* 1 held gangs"):
        simulate(QUEUED, split_wait=WaitSettings(runtime_estimate="oracle", max_s=60))

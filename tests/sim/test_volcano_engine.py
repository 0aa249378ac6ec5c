"""``--quota volcano``: trace jobs enqueued, reclaimed and charged by the rules of kilter's Volcano verbs."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from kilter.sim.compose import build
from kilter.sim.engine import SimConfig, Simulation
from kilter.sim.metrics import metrics
from kilter.sim.policies import make_policy
from kilter.sim.queues import queue_setup
from kilter.sim.run import simulate
from kilter.sim.trace import TraceJob
from kilter.sim.volcano_engine import VolcanoSession
from kilter.topology.fleet import Fleet
from tests.sim.conftest import jobs, nvl72
from tests.sim.test_engine import two_teams

VOLCANO = SimConfig(quota="volcano", fair=True)
RECLAIM = {"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"}


def run(fleet: Fleet, trace: list[TraceJob], objects: list[dict[str, Any]], policy: str = "kilter") -> Simulation:
    queues = queue_setup(objects, fleet, Counter(j.queue for j in trace))
    sim = build(fleet, trace, make_policy(policy), queues, VOLCANO)
    sim.run()
    return sim


def teams_trace() -> list[TraceJob]:
    # a fills the whole 72-GPU domain at t=0 (borrowing 36 of b's 36); b asks for 4 x 4 GPUs at t=10.
    return jobs(*[(0, 1000, 4, "a")] * 18, *[(10, 100, 4, "b")] * 4)


def test_simulate_picks_the_volcano_admission_when_asked() -> None:
    r = simulate(lambda: nvl72(1), jobs((0, 100, 8)), "kilter", config=VOLCANO)
    assert isinstance(r.simulation.admission, VolcanoSession)
    assert type(simulate(lambda: nvl72(1), jobs((0, 100, 8)), "kilter").simulation) is Simulation


def test_a_queue_within_its_nominal_quota_is_enqueued_and_reclaims_from_the_borrower() -> None:
    sim = run(nvl72(1), teams_trace(), two_teams(RECLAIM))
    o = sim.outcome
    # b's jobs are enqueued "once reclaimed from" a's, each takes one of a's 4-GPU jobs and starts at once;
    # a's evicted jobs (56 + 4 > 72 - 16 while b holds 16 of its nominal) wait until b's end at 110.
    assert o.start[18:].tolist() == [10.0] * 4
    assert sim.preemptions == 4
    assert (o.start[:18] == 110.0).sum() == 4
    assert metrics(sim)["completed"] == 22


def test_without_a_preemption_policy_the_jobs_are_not_enqueued_until_the_borrowed_gpus_come_back() -> None:
    sim = run(nvl72(1), teams_trace(), two_teams(None))
    assert sim.outcome.start[18:].tolist() == [1000.0] * 4
    assert sim.preemptions == 0


def test_an_enqueued_job_holds_its_quota_while_its_gang_waits_for_nodes() -> None:
    # One queue of 72 GPUs (every tray's) on a rack with 3 unhealthy trays: 60 usable. The 40-GPU job runs;
    # the 24 is enqueued (40 + 24 = 64 of 72) but 60 - 40 = 20 idle GPUs cannot hold it, so it waits holding 24;
    # the 8 is enqueued (72 of 72) and starts; the 4 is refused (76 > 72) though 12 GPUs are idle, and starts
    # when the 40 ends. Kueue charges only what it admits: there the 4 starts at once.
    trace = jobs((0, 100, 40), (1, 100, 24), (2, 100, 8), (3, 100, 4))
    sim = run(nvl72(1, unhealthy=3), trace, [])
    assert sim.outcome.start.tolist() == [0.0, 100.0, 2.0, 100.0]
    kueue = simulate(lambda: nvl72(1, unhealthy=3), trace, "kilter").simulation
    assert kueue.outcome.start.tolist() == [0.0, 100.0, 2.0, 3.0]


def test_every_job_runs_to_the_end_exactly_once_and_gives_back_all_it_was_charged() -> None:
    from kilter.cli.demo_compare import demo_objects
    from kilter.cli.sources import DEMO_QUEUES
    from kilter.sim import synthetic
    from kilter.sim.fleetspec import fleet_from_objects
    from kilter.state import snapshot

    # The demo cluster's queues (reclaimWithinCohort: Any, a lending limit, a 2h min-runtime) under load.
    trace = synthetic.generate("philly", jobs=1500, seed=0, gpu_scale=4)
    fleet = fleet_from_objects(demo_objects())
    sim = run(fleet, trace, snapshot.load_documents(DEMO_QUEUES), "spread")
    done = ~np.isnan(sim.outcome.end)
    assert done.sum() + len(sim.outcome.never) == len(trace)
    assert (sim.outcome.end[done] >= sim.outcome.start[done]).all()
    assert int(fleet.bitmap.node_used_gpus.sum()) == 0  # everything booked was given back
    tree = sim.queues.tree
    assert all(not v for n in (*tree.cluster_queues.values(), *tree.cohorts.values()) for v in n.usage.values())

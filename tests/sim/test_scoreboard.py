"""The scoreboard: split models, what each policy asks, results by job class, and kilter against the best other policy.

GB200 NVL72 racks: 18 trays of 4 GPUs per rack. Job GPUs are whole trays.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from kilter.sim.compose import build
from kilter.sim.engine import SimConfig, Simulation, slowdown_factor
from kilter.sim.metrics import BOUNDED_SLOWDOWN_FLOOR_S, metrics, versus_best
from kilter.sim.placement import PlacementPolicy
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


@pytest.mark.parametrize(
    ("model", "extra", "crossed", "factor"),
    [
        pytest.param("per-domain", 3, False, 1 + 0.2 * 3, id="per-domain: 0.2 per extra domain, 3 extra = 1.6"),
        pytest.param("per-domain", 1, True, 1 + 0.2 + 0.1, id="per-domain: one extra and a block crossing = 1.3"),
        pytest.param("step", 3, False, 1 + 0.2, id="step: any split costs 0.2 once = 1.2"),
        pytest.param("step", 1, True, 1 + 0.2 + 0.1, id="step: split and crossing = 1.3"),
        pytest.param("step", 0, False, 1.0, id="step: no split, no price"),
        pytest.param("none", 3, True, 1.0, id="none: placement never slows"),
    ],
)
def test_each_split_model_prices_a_split_as_it_says(model: str, extra: int, crossed: bool, factor: float) -> None:
    config = SimConfig(split_model=model, split_slowdown=0.2, block_slowdown=0.1)  # type: ignore[arg-type]
    assert slowdown_factor(config, extra=extra, crossed=crossed) == pytest.approx(factor)


def split_three_ways() -> tuple[Fleet, list[TraceJob]]:
    """Jobs 0-2 keep 12 trays of racks 0-2 busy and job 3 all of rack 3 until t=1000; job 4 (18 trays) comes at t=1
    and, placed preferred, spreads over the three racks' 6 free trays each: 2 extra domains."""
    return nvl72(4), jobs((0, 1000, 48), (0, 1000, 48), (0, 1000, 48), (0, 1000, 72), (1, 100, 72))


@pytest.mark.parametrize(
    ("model", "run_s"),
    [
        # Job 4 (18 trays) finds rack 3 busy and 6 free trays in racks 0-2: three racks, 2 extra.
        pytest.param("per-domain", 100 * (1 + 0.5 * 2), id="per-domain: 100 s x (1 + 0.5 x 2) = 200 s"),
        pytest.param("step", 100 * (1 + 0.5), id="step: 100 s x 1.5 = 150 s"),
        pytest.param("none", 100.0, id="none: 100 s"),
    ],
)
def test_the_simulation_charges_the_split_model_it_was_given(model: str, run_s: float) -> None:
    fleet, trace = split_three_ways()
    sim = simulate(fleet, trace, "kueue-tas-preferred", split_model=model, split_slowdown=0.5, block_slowdown=0.0)
    o = sim.outcome
    assert o.domains[4] == 3 and o.min_domains[4] == 1
    assert o.run[4] == pytest.approx(run_s)


def test_under_auto_each_policy_asks_for_itself_and_a_forced_request_overrides_them() -> None:
    fleet, trace = split_three_ways()
    # Recommended Kueue TAS: 18 trays fit one rack, so job 4 is required there and waits for one (t=1000).
    waits = simulate(fleet, trace, "kueue-tas").outcome
    assert waits.start[4] == 1000.0 and waits.domains[4] == 1
    # The same policy made to ask preferred splits at once.
    forced = simulate(nvl72(4), trace, "kueue-tas", topology="preferred").outcome
    assert forced.start[4] == 1.0 and forced.domains[4] == 3


def test_a_policy_is_asked_once_per_job_shape() -> None:
    class Counting:
        name = "counting"

        def __init__(self) -> None:
            self.inner = make_policy("kueue-tas")
            self.asked: list[tuple[int, ...]] = []

        def ask(self, fleet: Fleet, gang: Any) -> Any:
            self.asked.append(tuple(c for c, _ in gang.pod_sets))
            return self.inner.ask(fleet, gang)  # type: ignore[attr-defined]

        def place(self, fleet: Fleet, gang: Any) -> Any:
            return self.inner.place(fleet, gang)

    policy = Counting()
    simulate(nvl72(2), jobs((0, 10, 8), (1, 10, 8), (2, 10, 16), (3, 10, 8)), policy)
    assert sorted(policy.asked) == [(2,), (4,)]


def test_results_are_split_by_job_class_with_bounded_slowdown_makespan_and_the_longest_wait() -> None:
    fleet = nvl72(2)
    # Job 0: 18 trays (one rack) from t=0 for 1000 s. Job 1: 25 trays (two racks at least) at t=0: with job 0 the
    # 36 trays would need to hold 43, so it waits until t=1000 and runs 2000 s. Job 2: 2 trays at t=10 for 100 s
    # goes ahead of it (BestEffortFIFO) on the free rack.
    sim = simulate(fleet, jobs((0, 1000, 72), (0, 2000, 100), (10, 100, 8)), "kilter")
    o = sim.outcome
    assert o.start.tolist() == [0.0, 1000.0, 10.0]
    m = metrics(sim)
    one, multi = m["classes"]["oneDomain"], m["classes"]["multiDomain"]
    assert (one["jobs"], multi["jobs"]) == (2, 1)
    assert one["meanWaitSeconds"] == 0.0 and multi["meanWaitSeconds"] == 1000.0
    assert one["meanJctSeconds"] == (1000 + 100) / 2 and multi["meanJctSeconds"] == 3000.0
    assert m["maxWaitSeconds"] == 1000.0
    assert m["makespanSeconds"] == 3000.0  # first submission t=0, last end t=3000
    # Bounded slowdowns: 1000/1000 = 1, 3000/2000 = 1.5, 100/max(100, 600) = 0.1667; the 95th percentile
    # interpolates between 1 and 1.5 at 0.95 x 2 = 1.9 of the way: 1 + 0.9 x 0.5 = 1.45.
    assert BOUNDED_SLOWDOWN_FLOOR_S == 600.0
    assert m["p95BoundedSlowdown"] == pytest.approx(float(np.percentile([1.0, 1.5, 100 / 600], 95)), abs=1e-3)


def _m(jct: float, one: float, multi: float) -> dict[str, Any]:
    return {
        "meanJctSeconds": jct,
        "classes": {"oneDomain": {"meanWaitSeconds": one}, "multiDomain": {"meanWaitSeconds": multi}},
    }


def test_kilter_is_set_against_the_best_other_policy_figure_by_figure() -> None:
    policies = {
        "kilter": _m(200.0, 30.0, 50.0),
        "kueue-tas": _m(100.0, 10.0, 100.0),
        "slurm": _m(150.0, 0.0, 40.0),
        "kueue-tas-kilter-wait": _m(50.0, 1.0, 1.0),  # runs kilter's rule: not an "other" policy
    }
    got = versus_best(policies, ours="kilter", others=["kueue-tas", "slurm"])
    assert got["meanJctSeconds"] == {"ratio": 2.0, "best": "kueue-tas", "ours": 200.0, "theirs": 100.0}
    assert got["oneDomainWait"]["best"] == "slurm" and got["oneDomainWait"]["ratio"] is None  # 30 s against 0
    assert got["multiDomainWait"] == {"ratio": 1.25, "best": "slurm", "ours": 50.0, "theirs": 40.0}
    assert "mean JCT 2 (kueue-tas)" in got["summary"]
    assert got["behind"] == ["mean JCT", "one-domain jobs' mean wait", "multi-domain jobs' mean wait"]
    ahead = versus_best({**policies, "kilter": _m(100.0, 0.0, 20.0)}, ours="kilter", others=["kueue-tas", "slurm"])
    assert ahead["behind"] == [] and ahead["summary"].endswith("ahead or level on all three")
    assert versus_best(policies, ours="kilter", others=[]) == {}

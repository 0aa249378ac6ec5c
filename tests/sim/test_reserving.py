"""Reservations with backfill in the simulator: the oldest waiting gang gets its domains, the others go around it."""

from __future__ import annotations

from kilter.sim.metrics import metrics
from kilter.sim.reserving import Reserving
from kilter.sim.split_hold import WaitSettings
from tests.sim.conftest import jobs
from tests.sim.test_split_hold import simulate

# Two racks of 18 trays. Jobs 0 and 1 hold 10 trays of each (rack 0 until t=1000, rack 1 until t=5000). Job 2
# (16 trays, 10,000 s) arrives at t=1 and would split over the 8 + 8 free trays; its own budget (0.2 x 10,000 s)
# lets it wait until t=2001 for one rack. Jobs 3-5 (one tray, 5000 s each) and job 6 (one tray, 100 s) follow.
TRACE = jobs((0, 1000, 40), (0, 5000, 40), (1, 10_000, 64), (2, 5000, 4), (3, 5000, 4), (4, 5000, 4), (5, 100, 4))
HOLDING_NOTHING = WaitSettings(runtime_estimate="oracle", holds="nothing", reserve=True)


def test_a_reservation_lets_the_waiting_gang_start_whole_when_its_rack_frees() -> None:
    # Reserved: rack 0 from t=1000, when job 0 is expected to end. Two trays of rack 0 are slack at that moment
    # (18 - 16), so two long one-tray jobs may still take rack 0; the third long one is steered to rack 1, and
    # the short one (ends at t=105, before the reservation starts) goes where the planner puts it.
    sim = simulate(TRACE, split_wait=HOLDING_NOTHING)
    o = sim.outcome
    assert (o.start[2], o.domains[2]) == (1000.0, 1)
    assert o.start[3:].tolist() == [2.0, 3.0, 4.0, 5.0]  # nobody waited for it
    m = metrics(sim)["reservations"]
    assert m["jobsSteered"] == 1 and m["placementsTurnedAway"] == 0
    assert m["startErrorSeconds"]["mean"] == 0.0  # it started when it was promised


def test_without_the_reservation_the_long_jobs_take_its_rack_and_it_starts_split() -> None:
    sim = simulate(TRACE, split_wait=WaitSettings(runtime_estimate="oracle", holds="nothing", reserve=False))
    assert (sim.outcome.start[2], sim.outcome.domains[2]) == (2001.0, 2)
    assert "reservations" not in metrics(sim)


def test_on_a_saturated_fleet_no_gang_gets_a_reservation() -> None:
    # Three whole-rack jobs queue from t=0 until job 0 ends: over job 2's expected run a job waited all along,
    # so holding room for job 2 would keep it from a backlog that outlasts it. It waits for a rack as a required
    # gang would, and the one-tray jobs go wherever they fit.
    saturated = jobs((0, 3000, 40), (0, 5000, 40), (0, 10, 72), (0, 10, 72), (0, 10, 72), (1, 1000, 64), (2, 5000, 4))
    sim = simulate(saturated, split_wait=HOLDING_NOTHING)
    assert isinstance(sim.reserving, Reserving)
    assert 5 not in sim.reserving.owners and sim.reserving.owners  # others did get one while nothing queued
    assert (sim.outcome.start[5], sim.outcome.domains[5]) == (3030.0, 1)
    assert sim.outcome.start[6] == 2.0

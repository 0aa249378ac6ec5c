"""A run put together from its configuration: the engine, its admission step, and the parts that add events.

``SimConfig.quota`` picks the admission (Kueue's cycles, or Volcano's
session); ``SimConfig.failures`` adds node failures and the gangs'
checkpoints (``failing.NodeFailures``); ``SimConfig.maintenance`` adds a
rollout (``maintenance.Maintenance``), whose kills roll gangs back to the
same checkpoints, so a rollout always comes with the checkpoints (and with
no node failing unless the failure settings say so). Any of these combine:
a node failing during a rollout is a failure (counted as one), and comes
back cordoned while its domain is out. Under Kueue's cycles a policy that
can be steered (kilter's planner) may also get reservations with backfill
(``reserving.Reserving``, ``--reservations on``).

Slurm's scheduler (``slurm_backfill``) is its own engine, not a part: its
main scheduler and backfill replace the admission step, and its
reservations rest on every running job keeping its nodes until its time
limit, which node failures' repairs and a rollout's kills would break under
it; ``run.simulate`` refuses those combinations.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from kilter.sim.engine import SimConfig, Simulation
from kilter.sim.failing import NodeFailures
from kilter.sim.failure_model import FailureClock, FailureSettings, NoFailures
from kilter.sim.kueue_cycles import KueueCycles
from kilter.sim.maintenance import Maintenance
from kilter.sim.parts import AdmissionStep
from kilter.sim.placement import PlacementPolicy
from kilter.sim.queues import QueueSetup
from kilter.sim.reserving import Reserving, Steerable
from kilter.sim.trace import TraceJob
from kilter.sim.volcano_engine import VolcanoSession
from kilter.topology.fleet import Fleet

__all__ = ["admission_for", "build"]


def admission_for(config: SimConfig) -> Callable[[Simulation], AdmissionStep]:
    """The maker of the admission step ``config`` asks for: Volcano's session, or Kueue's cycles."""
    return VolcanoSession if config.quota == "volcano" else KueueCycles


def build(
    fleet: Fleet,
    jobs: Sequence[TraceJob],
    policy: PlacementPolicy,
    queues: QueueSetup,
    config: SimConfig,
    *,
    samples: int = 2000,
    clock: FailureClock | None = None,
) -> Simulation:
    """The run ``config`` describes, ready to ``run``; ``clock`` replaces the seeded node failures (tests script
    failures with it)."""
    if config.maintenance is not None and config.failures is None:  # a kill loses the work since a checkpoint
        config = dataclasses.replace(config, failures=FailureSettings(math.inf, seed=config.split_wait.seed))
    sim = Simulation(fleet, jobs, policy, queues, config, admission=admission_for(config), samples=samples)
    kueue = config.quota == "kueue"  # Volcano's session has no backfill
    if config.split_wait.reserve and sim.hold is not None and isinstance(policy, Steerable) and kueue:
        reserving = Reserving(sim, sim.hold, policy)
        sim.reserving = reserving
        sim.add(reserving)
    if config.failures is not None:
        if clock is None and not math.isfinite(config.failures.node_mtbf_h):
            clock = NoFailures()
        failures = NodeFailures(sim, config.failures, clock=clock)
        sim.add(failures)
        if config.maintenance is not None:
            sim.add(Maintenance(sim, failures, config.maintenance))
    return sim

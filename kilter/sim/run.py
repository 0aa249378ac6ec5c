"""One simulation from its parts: a fleet, a trace, queues and a policy, to metrics and a timeline.

The run's parts are ``compose.build``'s (Slurm's scheduler is its own
engine). Every run builds its own idle fleet and quota tree (a simulation
books GPUs and quota as it goes), so the policies of one comparison never
share state and each run is deterministic for its seed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kilter.model.errors import InputError
from kilter.sim.compose import build
from kilter.sim.engine import Progress, SimConfig, Simulation
from kilter.sim.metrics import metrics
from kilter.sim.placement import PlacementPolicy
from kilter.sim.policies import make_policy
from kilter.sim.queues import queue_setup
from kilter.sim.slurm_backfill import SlurmSimulation
from kilter.sim.slurm_block import SlurmBlock
from kilter.sim.trace import TraceJob
from kilter.topology.fleet import Fleet

__all__ = ["Run", "simulate"]


@dataclass
class Run:
    policy: str
    metrics: dict[str, Any]
    simulation: Simulation


def simulate(
    make_fleet: Callable[[], Fleet],
    jobs: Sequence[TraceJob],
    policy: str | PlacementPolicy,
    *,
    queue_objects: Sequence[Any] = (),
    config: SimConfig | None = None,
    seed: int = 0,
    progress: Progress | None = None,
) -> Run:
    fleet = make_fleet()
    queues = queue_setup(queue_objects, fleet, Counter(j.queue for j in jobs))
    config = config or SimConfig()
    chosen = make_policy(policy, seed=seed) if isinstance(policy, str) else policy
    sim: Simulation
    if isinstance(chosen, SlurmBlock):
        refused = [
            flag
            for flag, on in (
                ("node failures", config.failures is not None),
                ("maintenance", config.maintenance is not None),
                ("--quota volcano", config.quota == "volcano"),
            )
            if on
        ]
        if refused:
            raise InputError(
                f"slurm is simulated without {' or '.join(refused)}: its backfill is its own scheduler, whose "
                "reservations rest on every running job keeping its nodes to its time limit (failures and a "
                "rollout's kills take them away) and which replaces Kueue's or Volcano's admission"
            )
        sim = SlurmSimulation(fleet, jobs, chosen, queues, config)
    else:
        sim = build(fleet, jobs, chosen, queues, config)
    sim.run(progress)
    return Run(chosen.name, metrics(sim), sim)

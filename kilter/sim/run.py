"""One simulation from its parts: a fleet, a trace, queues and a policy, to metrics and a timeline.

Every run builds its own idle fleet and quota tree (a simulation books
GPUs and quota as it goes), so the policies of one comparison never share
state and each run is deterministic for its seed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kilter.model.errors import InputError
from kilter.sim.engine import Progress, SimConfig, Simulation
from kilter.sim.failing import FailingSimulation
from kilter.sim.maintenance import MaintenanceSimulation
from kilter.sim.metrics import metrics
from kilter.sim.placement import PlacementPolicy
from kilter.sim.policies import make_policy
from kilter.sim.queues import queue_setup
from kilter.sim.slurm_backfill import SlurmSimulation
from kilter.sim.slurm_block import SlurmBlock
from kilter.sim.trace import TraceJob
from kilter.sim.volcano_engine import VolcanoSimulation
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
    kind: type[Simulation] = VolcanoSimulation if config.quota == "volcano" else Simulation
    if isinstance(chosen, SlurmBlock):
        if config.failures is not None or config.maintenance is not None or config.quota == "volcano":
            raise InputError("slurm is simulated without node failures, maintenance or --quota volcano")
        kind = SlurmSimulation
    if config.failures is not None or config.maintenance is not None:
        if config.quota == "volcano":
            raise InputError(
                "node failures and maintenance are simulated with Kueue's admission only (--quota fifo or fair)"
            )
        kind = MaintenanceSimulation if config.maintenance is not None else FailingSimulation
    sim = kind(fleet, jobs, chosen, queues, config)
    sim.run(progress)
    return Run(chosen.name, metrics(sim), sim)

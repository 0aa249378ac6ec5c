"""Trace-driven simulation of placement and quota policies over kilter's own topology and quota code."""

from kilter.sim import (
    engine,
    failing,
    failure_model,
    fleetspec,
    gangs,
    kueue_tas,
    kueue_tas_balanced,
    kueue_tas_tree,
    maintenance,
    maintenance_spec,
    metrics,
    placement,
    plot,
    policies,
    queues,
    region_split,
    regions,
    run,
    simple,
    slurm_backfill,
    slurm_block,
    slurm_cycle,
    slurm_nodespace,
    split_hold,
    synthetic,
    trace,
    volcano_binpack,
    volcano_engine,
    volcano_queues,
)
from kilter.sim.engine import Outcome, SimConfig, Simulation, Timeline
from kilter.sim.failing import FailingSimulation
from kilter.sim.failure_model import FailureSettings
from kilter.sim.gangs import Gang, gang_for
from kilter.sim.maintenance import MaintenanceSimulation
from kilter.sim.maintenance_spec import MaintenanceSettings
from kilter.sim.placement import PlacementPolicy, Releasing
from kilter.sim.policies import POLICIES, make_policy
from kilter.sim.regions import Region, simulate_regions
from kilter.sim.run import Run, simulate
from kilter.sim.trace import TraceJob, read_trace
from kilter.sim.volcano_engine import VolcanoSimulation

__all__ = [
    "POLICIES",
    "FailingSimulation",
    "FailureSettings",
    "Gang",
    "MaintenanceSettings",
    "MaintenanceSimulation",
    "Outcome",
    "PlacementPolicy",
    "Region",
    "Releasing",
    "Run",
    "SimConfig",
    "Simulation",
    "Timeline",
    "TraceJob",
    "VolcanoSimulation",
    "engine",
    "failing",
    "failure_model",
    "fleetspec",
    "gang_for",
    "gangs",
    "kueue_tas",
    "kueue_tas_balanced",
    "kueue_tas_tree",
    "maintenance",
    "maintenance_spec",
    "make_policy",
    "metrics",
    "placement",
    "plot",
    "policies",
    "queues",
    "read_trace",
    "region_split",
    "regions",
    "run",
    "simple",
    "simulate",
    "simulate_regions",
    "slurm_backfill",
    "slurm_block",
    "slurm_cycle",
    "slurm_nodespace",
    "split_hold",
    "synthetic",
    "trace",
    "volcano_binpack",
    "volcano_engine",
    "volcano_queues",
]

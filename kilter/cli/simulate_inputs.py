"""``kilter simulate``'s inputs: the trace, the fleet (spares held out), and the run's settings read from the
flags and checked, as every mode of the command (policies compared, ``--regions``, ``--maintenance``) needs them."""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kilter.cli import sources
from kilter.cli.spare_flag import read_spare_nodes
from kilter.model.annotations import SPARE_NODES_PER_DOMAIN
from kilter.model.durations import parse_duration
from kilter.model.errors import InputError
from kilter.sim import fleetspec, synthetic
from kilter.sim.engine import Progress, SimConfig
from kilter.sim.failure_model import FailureSettings
from kilter.sim.policies import POLICIES
from kilter.sim.split_hold import WaitSettings
from kilter.sim.trace import TraceJob, read_trace
from kilter.state import cluster, snapshot
from kilter.topology import split_wait
from kilter.topology.catalog import Catalog
from kilter.topology.fleet import Fleet, build_fleet
from kilter.topology.health import DEFAULTS, HealthSignals

__all__ = [
    "SPARE_KINDS",
    "failure_settings",
    "load_fleet",
    "load_jobs",
    "one_fleet_inputs",
    "policies",
    "progress_bar",
    "sim_config",
    "sweep_values",
    "told_slowdown",
    "wait_settings",
    "with_spares",
]


SPARE_KINDS = ("ResourceFlavor", "ClusterQueue", "Cohort")


def load_jobs(spec: str, *, gpu_scale: int, time_scale: float, limit: int | None, seed: int) -> list[TraceJob]:
    if gpu_scale < 1:
        raise InputError("--gpu-scale must be at least 1")
    if not time_scale > 0:
        raise InputError("--time-scale must be above 0")
    if limit is not None and limit < 1:
        raise InputError("--limit must be at least 1")
    if spec.startswith("synthetic:"):
        profile = spec.removeprefix("synthetic:")
        if profile not in synthetic.PROFILES:
            raise InputError(f"unknown synthetic profile {profile!r} (known: {', '.join(sorted(synthetic.PROFILES))})")
        return synthetic.generate(profile, jobs=limit, seed=seed, gpu_scale=gpu_scale, time_scale=time_scale)
    return read_trace(Path(spec), gpu_scale=gpu_scale, time_scale=time_scale, limit=limit)


def load_fleet(
    path: Path, *, seed: int, catalog: Catalog | None = None, health: HealthSignals = DEFAULTS
) -> Callable[[], Fleet]:
    """A maker of fresh idle fleets from a fleet spec or a snapshot (whose bound pods are left out); ``health``
    judges a snapshot's Nodes (a spec's generated nodes carry no health signal)."""
    docs = snapshot.load_documents(path)
    if len(docs) == 1 and isinstance(docs[0], dict) and "kind" not in docs[0]:
        spec = fleetspec.parse_spec(docs[0], seed=seed, catalog=catalog)
        return lambda: fleetspec.fleet_from_spec(spec, catalog)
    state = cluster.load(path, catalog=catalog)
    if not state.nodes:
        raise InputError(f"{path}: neither a fleet spec ({{platforms: [...]}}) nor a snapshot with Nodes")
    return lambda: build_fleet(
        state.nodes, catalog=catalog, topologies=state.topologies, hypernodes=state.hypernodes, health=health
    )


def one_fleet_inputs(args: argparse.Namespace) -> tuple[list[TraceJob], list[Any], Callable[[], Fleet]]:
    """The trace's jobs, the queue file's objects and the fleet maker (spares kept) of a run on one fleet."""
    jobs = load_jobs(args.trace, gpu_scale=args.gpu_scale, time_scale=args.time_scale, limit=args.limit, seed=args.seed)
    if not jobs:
        raise InputError("the trace has no jobs")
    spare_nodes = read_spare_nodes(args.spare_nodes_per_domain)
    queue_objects = snapshot.load_documents(args.queues) if args.queues else []
    health = sources.health_of(args.health_signals)
    make_fleet = with_spares(load_fleet(args.fleet, seed=args.seed, health=health), queue_objects, spare_nodes)
    return jobs, queue_objects, make_fleet


def with_spares(make_fleet: Callable[[], Fleet], queue_objects: list[Any], default: int) -> Callable[[], Fleet]:
    """``make_fleet`` whose fleets keep the spare nodes ``--spare-nodes-per-domain`` and the queue file's
    ``kilter.dev/spare-nodes-per-domain`` annotations ask for (``topology.spare_settings``; kilter's placement
    holds them out, the baselines do not know of them). A bad annotation is refused here, as the webhook would."""
    state = cluster.from_objects([o for o in queue_objects if isinstance(o, dict) and o.get("kind") in SPARE_KINDS])
    state.spare_nodes_default = default
    if not default and not any(SPARE_NODES_PER_DOMAIN in o.metadata.annotations for o in _spare_objects(state)):
        return make_fleet

    def make() -> Fleet:
        fleet = make_fleet()
        problems = state.hold_spares(fleet)
        if problems:
            raise InputError(problems[0])
        return fleet

    return make


def _spare_objects(state: cluster.ClusterState) -> list[Any]:
    return [*state.flavors, *state.cluster_queues, *state.cohorts]


def policies(text: str) -> list[str]:
    names = list(POLICIES) if text == "all" else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        raise InputError(f"unknown policy {unknown[0] if unknown else text!r} (known: {', '.join(POLICIES)}, all)")
    return names


def progress_bar(label: str) -> Progress | None:
    if not sys.stderr.isatty():
        return None
    last = [0.0]

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] < 0.2 and done < total:
            return
        last[0] = now
        width = 30
        filled = width * done // max(total, 1)
        print(f"\r{label:<16} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}", end="", file=sys.stderr)
        if done >= total:
            print(file=sys.stderr)

    return show


def sweep_values(text: str | None) -> list[float]:
    if not text:
        return []
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"--sweep: expected numbers separated by commas, got {text!r}") from None
    if not values or any(not 0 <= v <= 100 for v in values):
        raise InputError("--sweep: every slowdown must be between 0 and 100")
    return values


def wait_settings(args: argparse.Namespace) -> WaitSettings:
    """The split-wait flags, checked as the annotations are."""
    if not 0 <= args.split_wait <= split_wait.MAX_FACTOR:
        raise InputError(f"--split-wait must be between 0 and {split_wait.MAX_FACTOR:g} (0 turns waiting off)")
    max_s = parse_duration(args.split_wait_max, path="--split-wait-max")
    return WaitSettings(
        args.split_wait,
        max_s,
        args.runtime_estimate,
        args.seed,
        holds=args.split_wait_holds,
        clock=args.split_wait_clock,
        price=args.split_wait_price,
        reserve=args.reservations == "on",
        split_slowdown=told_slowdown(args.split_wait_slowdown),
    )


def told_slowdown(text: str) -> float | None:
    """``--split-wait-slowdown``: a number from 0 to 100, or ``true`` (None: the simulation's own)."""
    if text.strip().lower() == "true":
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 100:
        raise InputError(f"--split-wait-slowdown: expected a number from 0 to 100 or 'true', got {text!r}")
    return value


def failure_settings(args: argparse.Namespace) -> FailureSettings | None:
    """The failure flags, checked; None when nodes never fail."""
    given = {
        "--repair-hours": args.repair_hours,
        "--checkpoint-minutes": args.checkpoint_minutes,
        "--restart-minutes": args.restart_minutes,
        "--failure-policy": args.failure_policy,
    }
    rollout = getattr(args, "maintenance", None) is not None  # its kills lose the work since the last checkpoint
    if args.node_mtbf is None:
        kept = ("--checkpoint-minutes", "--restart-minutes") if rollout else ()
        stray = next((flag for flag, value in given.items() if value is not None and flag not in kept), None)
        if stray is not None:
            raise InputError(f"{stray} needs --node-mtbf (nodes never fail without it)")
        if not rollout:
            return None
    elif not 0 < args.node_mtbf < 1e9:
        raise InputError("--node-mtbf must be a number of hours above 0")
    mtbf_h = math.inf if args.node_mtbf is None else args.node_mtbf  # inf: checkpoints only, no node fails
    defaults = FailureSettings(mtbf_h)
    repair_h = defaults.repair_h if args.repair_hours is None else args.repair_hours
    checkpoint_min = defaults.checkpoint_s / 60 if args.checkpoint_minutes is None else args.checkpoint_minutes
    restart_min = defaults.restart_s / 60 if args.restart_minutes is None else args.restart_minutes
    for flag, value in (
        ("--repair-hours", repair_h),
        ("--checkpoint-minutes", checkpoint_min),
        ("--restart-minutes", restart_min),
    ):
        if not 0 <= value < 1e9:
            raise InputError(f"{flag} must be 0 or more")
    policy = None if args.failure_policy in (None, "auto") else args.failure_policy
    return FailureSettings(mtbf_h, repair_h, checkpoint_min * 60, restart_min * 60, policy, args.seed)


def sim_config(args: argparse.Namespace) -> SimConfig:
    """The simulation settings the flags ask for, checked."""
    for flag in ("split_slowdown", "block_slowdown"):
        if not 0 <= getattr(args, flag) <= 100:
            raise InputError(f"--{flag.replace('_', '-')} must be between 0 and 100")
    return SimConfig(
        topology=args.topology_request,
        fair=args.quota in ("fair", "volcano"),  # the Volcano verbs run Kueue's fair-sharing preemption
        quota="volcano" if args.quota == "volcano" else "kueue",
        split_slowdown=args.split_slowdown,
        block_slowdown=args.block_slowdown,
        split_model=args.split_model,
        split_wait=wait_settings(args),
        failures=failure_settings(args),
    )

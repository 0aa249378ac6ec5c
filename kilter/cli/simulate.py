"""``kilter simulate``: replay a trace on a fleet under placement and quota policies, and compare them.

The module runs past 500 lines because every simulation flag is checked and reported here, beside the parser, and
``--regions`` (``kilter.sim.regions``) adds its own runner and table over the same flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kilter.cli import render, sources
from kilter.cli.spare_flag import add_spare_argument, read_spare_nodes
from kilter.model.annotations import SPARE_NODES_PER_DOMAIN
from kilter.model.durations import parse_duration
from kilter.model.errors import InputError
from kilter.sim import fleetspec, region_split, synthetic
from kilter.sim.engine import SPLIT_MODELS, Progress, SimConfig
from kilter.sim.failure_model import DEFAULT_RESTART_S, FAILURE_POLICIES, FailureSettings
from kilter.sim.maintenance_spec import ORDERS, MaintenanceSettings, parse_maintenance
from kilter.sim.metrics import versus_best
from kilter.sim.placement import waits_for_fewer_domains
from kilter.sim.plot import plot_runs
from kilter.sim.policies import POLICIES
from kilter.sim.regions import DISPATCHERS, Region, RegionRun, simulate_regions
from kilter.sim.run import Run, simulate
from kilter.sim.split_hold import RUNTIME_ESTIMATES, WAIT_CLOCKS, WAIT_HOLDS, WaitSettings
from kilter.sim.trace import TraceJob, read_trace
from kilter.state import cluster, snapshot
from kilter.topology import split_wait
from kilter.topology.catalog import Catalog
from kilter.topology.fleet import Fleet, build_fleet
from kilter.topology.health import DEFAULTS, HealthSignals

__all__ = ["add_parser", "load_fleet", "load_jobs", "run", "with_spares"]

SPARE_KINDS = ("ResourceFlavor", "ClusterQueue", "Cohort")

COLUMNS = (
    ("jobs", "JOBS"),
    ("completed", "DONE"),
    ("neverFit", "NEVER FIT"),
    ("meanWaitSeconds", "MEAN WAIT s"),
    ("p95WaitSeconds", "P95 WAIT s"),
    ("maxWaitSeconds", "MAX WAIT s"),
    ("meanJctSeconds", "MEAN JCT s"),
    ("p95BoundedSlowdown", "P95 BSLD"),
    ("utilization", "UTIL"),
    ("usefulUtilization", "USEFUL"),
    ("singleDomainFraction", "1-DOMAIN"),
    ("meanDomainsPerGang", "DOMAINS/MIN"),
    ("fragmentation", "FRAG"),
    ("jainFairness", "JAIN"),
    ("preemptions", "PREEMPT"),
    ("splitWaited", "SPLIT WAITS"),
    ("splitWaitMeanSeconds", "MEAN SPLIT WAIT s"),
)
CLASS_COLUMNS = (
    ("jobs", "JOBS"),
    ("meanWaitSeconds", "MEAN WAIT s"),
    ("p95WaitSeconds", "P95 WAIT s"),
    ("meanJctSeconds", "MEAN JCT s"),
)
CLASSES = (("oneDomain", "1-DOMAIN"), ("multiDomain", "MULTI-DOMAIN"))
FAILURE_COLUMNS = (
    ("failurePolicy", "ON FAILURE"),
    ("failuresInjected", "FAILURES"),
    ("gangsHitByFailures", "GANGS HIT"),
    ("failureEvictions", "REQUEUED"),
    ("goodput", "GOODPUT"),
    ("gpuHoursLostToFailures", "LOST GPU-h"),
    ("repairs", "REPAIRS"),
    ("repairsSameDomainFraction", "SAME DOMAIN"),
    ("meanResumeSeconds", "MEAN RESUME s"),
    ("p95ResumeSeconds", "P95 RESUME s"),
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "simulate",
        help="replay a job trace on a fleet under placement and quota policies",
        description="Replay a trace on a simulated fleet with kilter's own placement and quota code, "
        "and compare it with the placement users run today.",
    )
    p.add_argument("--fleet", type=Path, required=True, help="fleet YAML ({platforms: [...]}) or a snapshot file")
    p.add_argument(
        "--trace",
        required=True,
        help="trace CSV (Philly: timestamp,duration,num_gpus,gpu_time,cluster; or submit_time,duration,gpus[,queue])"
        f", or synthetic:PROFILE ({', '.join(sorted(synthetic.PROFILES))})",
    )
    p.add_argument("--queues", type=Path, help="Kueue ClusterQueue/Cohort/ResourceFlavor YAML (default: one queue)")
    sources.add_health_argument(p)
    p.add_argument(
        "--policy",
        default="kilter",
        help=f"placement policy, or several separated by commas, or 'all' ({', '.join(POLICIES)})",
    )
    p.add_argument(
        "--quota",
        choices=("fifo", "fair", "volcano"),
        default="fifo",
        help="admission by Kueue's cycles in classical order (fifo) or with fair sharing (fair); or volcano: each "
        "ClusterQueue is a Volcano Queue bound to it and jobs are enqueued, reclaimed and charged by the rules of "
        "kilter's Volcano verbs (Kueue's fair-sharing preemption, as kilter serve runs them)",
    )
    p.add_argument(
        "--topology-request",
        choices=("auto", "required", "preferred", "unconstrained"),
        default="auto",
        help="what jobs ask of the scale-up domain: auto (default) asks as each policy's operators would configure "
        "a job of its shape (Kueue TAS: required rack, else rack slices; Volcano: hard mode at the tier that holds "
        "it; Slurm: --segment; kilter: preferred); the others force one request on every job of every policy",
    )
    p.add_argument(
        "--split-slowdown",
        type=float,
        default=0.2,
        help="run-time cost of a split: per extra scale-up domain (per-domain model) or once (step)",
    )
    p.add_argument("--block-slowdown", type=float, default=0.1, help="run-time cost of an avoidable block crossing")
    p.add_argument(
        "--split-model",
        choices=SPLIT_MODELS,
        default="per-domain",
        help="how a split slows a gang: per-domain (default: 1 + split slowdown x extra domains, plus the block "
        "slowdown), step (1 + split slowdown once it uses more domains than its fewest, plus the block slowdown) "
        "or none (placement never slows a gang)",
    )
    p.add_argument(
        "--split-wait",
        type=float,
        default=split_wait.DEFAULT_FACTOR,
        metavar="FACTOR",
        help="kilter only: a preferred gang whose plan spans more domains than it needs waits for fewer up to "
        "FACTOR x split slowdown x extra domains x its expected runtime (0 turns waiting off; "
        f"default {split_wait.DEFAULT_FACTOR:g}); a ClusterQueue's or Cohort's {split_wait.SPLIT_WAIT} wins",
    )
    p.add_argument(
        "--split-wait-max",
        default=split_wait.format_duration(split_wait.DEFAULT_MAX_S),
        metavar="DURATION",
        help=f"the longest such wait (default {split_wait.format_duration(split_wait.DEFAULT_MAX_S)}); "
        f"a ClusterQueue's or Cohort's {split_wait.SPLIT_WAIT_MAX} wins",
    )
    p.add_argument(
        "--split-wait-slowdown",
        default=f"{split_wait.DEFAULT_SPLIT_SLOWDOWN:g}",
        metavar="SLOWDOWN|true",
        help="the split slowdown kilter's wait rule is told, as kilter serve's --split-slowdown (default "
        f"{split_wait.DEFAULT_SPLIT_SLOWDOWN:g}, its default); true hands it the simulation's own --split-slowdown, "
        "which no real cluster knows",
    )
    p.add_argument(
        "--runtime-estimate",
        choices=RUNTIME_ESTIMATES,
        default="learned",
        help="each job's expected runtime for the split wait: learned (median run time of its ClusterQueue's "
        "finished jobs of its size class), declared (the true duration x e^N(0,1): users' noisy estimates), "
        "oracle (the true duration, for comparison) or none (never wait); default learned",
    )
    p.add_argument(
        "--split-wait-holds",
        choices=WAIT_HOLDS,
        default="quota",
        help="what a gang holds while it waits for fewer domains: its ClusterQueue quota (as a Kueue Workload "
        "waiting on its AdmissionCheck does; default) or nothing (the jobs behind it may take the room)",
    )
    p.add_argument(
        "--split-wait-clock",
        choices=WAIT_CLOCKS,
        default="reserved",
        help="when the wait budget starts: when the gang first fitted and was held, its quota reserved (default), "
        "or at its submission",
    )
    p.add_argument(
        "--node-mtbf",
        type=float,
        metavar="HOURS",
        help="inject node failures: each node fails as a Poisson process with this mean time between failures "
        "(seeded by --seed; default: nodes never fail)",
    )
    p.add_argument("--repair-hours", type=float, metavar="H", help="how long a failed node stays down (default 24)")
    p.add_argument(
        "--checkpoint-minutes",
        type=float,
        metavar="M",
        help="run time between a gang's checkpoints; a failure loses the work since the last (0: no checkpoints, "
        "a failure loses everything; default 30)",
    )
    p.add_argument(
        "--restart-minutes",
        type=float,
        metavar="M",
        help=f"time from a gang having its nodes again to computing again (default {DEFAULT_RESTART_S / 60:g})",
    )
    p.add_argument(
        "--failure-policy",
        choices=("auto", *FAILURE_POLICIES),
        help="how a gang hit by a failure recovers: kilter (repair in place), kueue-tas (Kueue's hot swap), requeue "
        "(the whole gang through the queue again) or kilter-replan (an experiment: repair only within the gang's "
        "domains, else requeue); auto (default): the placement policy's own, requeue for those without one",
    )
    p.add_argument("--gpu-scale", type=int, default=1, help="multiply every job's GPUs by K")
    p.add_argument("--time-scale", type=float, default=1.0, help="multiply submit times and durations by this")
    p.add_argument("--limit", type=int, help="only the first N jobs")
    p.add_argument("--seed", type=int, default=0, help="seed of the fleet's failures, the synthetic trace and ties")
    p.add_argument("--plot", type=Path, metavar="FILE.png", help="draw utilization and per-queue share over time")
    p.add_argument(
        "--sweep",
        metavar="LIST",
        help="also rank the policies by mean JCT with both slowdowns set to each of these values (e.g. 0,0.1,0.3,1)",
    )
    p.add_argument(
        "--regions",
        metavar="SPEC",
        help="split the trace over regions and compare four dispatchers (silo, kilter, MultiKueue's all-at-once "
        "and incremental) under --policy's placement: a count (3: regions r1..r3, each a copy of --fleet), names "
        "(eu,us,ap), or names with their own fleet files (eu=eu.yaml,us=us.yaml); add split=tenant (default: each "
        "tenant's jobs in one region) or split=arrival (jobs dealt out in turn), and delay=30s (default: what a "
        "job pays to start away from home), e.g. --regions eu,us,ap,split=arrival,delay=1m",
    )
    p.add_argument(
        "--maintenance",
        metavar="SPEC",
        help="a firmware rollout over every scale-up domain while the trace runs: compare kilter's planned drain "
        "(kilter maintenance plan's planner, re-planned at every step) with a rolling drain in name order, and with "
        "no maintenance, under --policy's placement: at=3d (start, from the trace's start; default 0s), step=4h "
        "(each domain out once drained; default 4h), k=2 (most domains cordoned or out at once; default 1), wait=6h "
        "(the longest a step waits for jobs to end; default 6h), window=7d (report whether the rollout fits), e.g. "
        "--maintenance at=3d,step=4h,k=2; a kill loses the work since the last checkpoint (--checkpoint-minutes)",
    )
    add_spare_argument(p)
    p.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    p.set_defaults(func=run)


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


def _one_fleet_inputs(args: argparse.Namespace) -> tuple[list[TraceJob], list[Any], Callable[[], Fleet]]:
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


def run(args: argparse.Namespace) -> int:
    if args.regions is not None:
        if args.maintenance is not None:
            raise InputError("--maintenance cannot be combined with --regions")
        return run_regions(args)
    if args.maintenance is not None:
        return run_maintenance(args)
    names = policies(args.policy)
    sweep = sweep_values(args.sweep)
    config = sim_config(args)
    jobs, queue_objects, make_fleet = _one_fleet_inputs(args)
    runs: list[Run] = []
    for name in names:
        started = time.perf_counter()
        r = simulate(
            make_fleet,
            jobs,
            name,
            queue_objects=queue_objects,
            config=config,
            seed=args.seed,
            progress=progress_bar(name),
        )
        r.metrics["wallSeconds"] = round(time.perf_counter() - started, 2)
        runs.append(r)
    ranking = rank_by_slowdown(make_fleet, jobs, names, queue_objects, config, sweep, seed=args.seed)
    versus = versus_kilter(runs)
    if args.plot:
        trace_name = args.trace if args.trace.startswith("synthetic:") else Path(args.trace).name
        title = f"{len(jobs)} jobs of {trace_name} (GPUs x{args.gpu_scale}) on {args.fleet.name}"
        plot_runs([(r.policy, r.simulation) for r in runs], args.plot, title=title)
    if args.output != "table":
        data = report(runs, args)
        if versus:
            data["versusBest"] = versus
        if ranking:
            data["rankingBySlowdown"] = ranking
        if args.plot:
            data["plot"] = str(args.plot)
        print(render.dump(data, args.output), end="")
        return 0
    columns = COLUMNS + (FAILURE_COLUMNS if config.failures is not None else ())
    print(
        render.table(
            ("POLICY", *(h for _, h in columns)), [(r.policy, *(r.metrics[k] for k, _ in columns)) for r in runs]
        ),
        end="",
    )
    print("\nBy job class (1-DOMAIN: jobs one scale-up domain can hold; MULTI-DOMAIN: the rest):")
    print(class_table(runs), end="")
    if versus:
        print(f"\n{versus['summary']}")
    never = runs[0].simulation.outcome.never
    if never:
        j, why = next(iter(never.items()))
        print(f"\n{len(never)} jobs can never fit (e.g. job {j}: {why})")
    if ranking:
        print("\nPolicies by mean JCT (best first) with both slowdowns set to:")
        print(render.table(("SLOWDOWN", "RANKING (mean JCT s)"), [(v["slowdown"], v["text"]) for v in ranking]), end="")
    if args.plot:
        print(f"\nplot: {args.plot}")
    return 0


def class_table(runs: list[Run]) -> str:
    """Each policy's wait and JCT apart for one-domain and multi-domain jobs."""
    headers = ("POLICY", *(f"{c} {h}" for _, c in CLASSES for _, h in CLASS_COLUMNS))
    rows = [(r.policy, *(r.metrics["classes"][key][k] for key, _ in CLASSES for k, _ in CLASS_COLUMNS)) for r in runs]
    return render.table(headers, rows)


def versus_kilter(runs: list[Run]) -> dict[str, Any]:
    """kilter against the best of the policies that run without kilter's rule (``metrics.versus_best``)."""
    others = [r.policy for r in runs if not waits_for_fewer_domains(r.simulation.policy)]
    return versus_best({r.policy: r.metrics for r in runs}, ours="kilter", others=others)


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


REGION_COLUMNS = (
    ("completed", "DONE"),
    ("neverRan", "NEVER RAN"),
    ("meanWaitSeconds", "MEAN WAIT s"),
    ("p95WaitSeconds", "P95 WAIT s"),
    ("meanJctSeconds", "MEAN JCT s"),
    ("utilization", "UTIL"),
    ("usefulUtilization", "USEFUL"),
)
REGION_TAIL = (
    ("leastDomainsFraction", "LEAST DOMAINS"),
    ("awayFromHome", "AWAY"),
    ("copiesPerJob", "COPIES/JOB"),
)


def run_regions(args: argparse.Namespace) -> int:
    """``--regions``: the trace split over regions, each dispatcher run in turn (``kilter.sim.regions``)."""
    spec = region_split.parse_regions(args.regions)
    names = policies(args.policy)
    if len(names) != 1:
        raise InputError("--regions compares dispatchers under one placement policy: give one --policy")
    for flag, value in (("--sweep", args.sweep), ("--plot", args.plot), ("--node-mtbf", args.node_mtbf)):
        if value is not None:
            raise InputError(f"{flag} cannot be combined with --regions")
    if args.quota == "volcano":
        raise InputError("--regions runs Kueue's admission (--quota fifo or fair)")
    config = sim_config(args)
    jobs = load_jobs(args.trace, gpu_scale=args.gpu_scale, time_scale=args.time_scale, limit=args.limit, seed=args.seed)
    spare_nodes = read_spare_nodes(args.spare_nodes_per_domain)
    queue_objects = snapshot.load_documents(args.queues) if args.queues else []
    health = sources.health_of(args.health_signals)
    paths = [Path(f) if f else args.fleet for f in spec.fleets]
    makers = [with_spares(load_fleet(p, seed=args.seed, health=health), queue_objects, spare_nodes) for p in paths]
    regions = [Region(name, make) for name, make in zip(spec.names, makers, strict=True)]
    capacity = [int(make().bitmap.domain_usable_gpus.sum()) for make in makers]
    homes = region_split.assign_homes(jobs, capacity, spec.split)
    runs: list[RegionRun] = []
    for dispatcher in DISPATCHERS:
        started = time.perf_counter()
        r = simulate_regions(
            regions, jobs, homes, dispatcher, policy=names[0], queue_objects=queue_objects, config=config,
            delay_s=spec.delay_s, seed=args.seed,
        )  # fmt: skip
        r.metrics["wallSeconds"] = round(time.perf_counter() - started, 2)
        runs.append(r)
    if args.output != "table":
        data = {
            "trace": args.trace,
            "placement": names[0],
            "split": spec.split,
            "dispatchDelaySeconds": spec.delay_s,
            "regions": [
                {"name": n, "fleet": str(p), "usableGpus": c, "homeJobs": homes.count(i)}
                for i, (n, p, c) in enumerate(zip(spec.names, paths, capacity, strict=True))
            ],
            "dispatchers": {r.dispatcher: r.metrics for r in runs},
        }
        print(render.dump(data, args.output), end="")
        return 0
    headers = ("DISPATCHER", *(h for _, h in REGION_COLUMNS), *(f"UTIL {n}" for n in spec.names))
    rows = [
        (
            r.dispatcher,
            *(r.metrics[k] for k, _ in REGION_COLUMNS),
            *(r.metrics["regionUtilization"][n] for n in spec.names),
            *(r.metrics[k] for k, _ in REGION_TAIL),
        )
        for r in runs
    ]
    print(render.table((*headers, *(h for _, h in REGION_TAIL)), rows), end="")
    split = ", ".join(
        f"{n} {homes.count(i)} ({c} GPUs)" for i, (n, c) in enumerate(zip(spec.names, capacity, strict=True))
    )
    print(f"\nhome jobs by region: {split}; split={spec.split}, delay={spec.delay_s:g}s, placement {names[0]}")
    return 0


MAINTENANCE_COLUMNS = (
    ("domainsMaintained", "DOMAINS"),
    ("steps", "STEPS"),
    ("jobsKilled", "KILLED"),
    ("gpuHoursLostToMaintenance", "LOST GPU-h"),
    ("gpuHoursIdleCordoned", "IDLE GPU-h"),
    ("rolloutHours", "ROLLOUT h"),
    ("mostDomainsOut", "MOST OUT"),
)
TRACE_COLUMNS = (
    ("completed", "DONE"),
    ("meanWaitSeconds", "MEAN WAIT s"),
    ("p95WaitSeconds", "P95 WAIT s"),
    ("meanJctSeconds", "MEAN JCT s"),
    ("utilization", "UTIL"),
)


def run_maintenance(args: argparse.Namespace) -> int:
    """``--maintenance``: the trace with no rollout, then with kilter's and the naive one (``kilter.sim.maintenance``),
    under one placement policy, on fresh fleets of the same seed."""
    spec = parse_maintenance(args.maintenance)
    names = policies(args.policy)
    if len(names) != 1:
        raise InputError("--maintenance compares rollouts under one placement policy: give one --policy")
    for flag, value in (("--sweep", args.sweep), ("--plot", args.plot)):
        if value is not None:
            raise InputError(f"{flag} cannot be combined with --maintenance")
    if args.quota == "volcano":
        raise InputError("--maintenance runs Kueue's admission (--quota fifo or fair)")
    config = sim_config(args)
    jobs, queue_objects, make_fleet = _one_fleet_inputs(args)
    rollouts: list[tuple[str, Run]] = []
    assert config.failures is not None
    failures = config.failures if math.isfinite(config.failures.node_mtbf_h) else None
    baseline = dataclasses.replace(config, failures=failures)  # no rollout: nothing is killed, no checkpoint matters
    for order in (None, *ORDERS):
        label: str = order or "none"
        started = time.perf_counter()
        r = simulate(
            make_fleet, jobs, names[0], queue_objects=queue_objects,
            config=dataclasses.replace(config, maintenance=spec.ordered_by(order)) if order else baseline,
            seed=args.seed, progress=progress_bar(f"maintenance {label}"),
        )  # fmt: skip
        r.metrics["wallSeconds"] = round(time.perf_counter() - started, 2)
        rollouts.append((label, r))
    if args.output != "table":
        data = {
            **report([r for _, r in rollouts], args),
            "placement": names[0],
            "maintenance": maintenance_report(spec, config.failures),
            "rollouts": {label: r.metrics for label, r in rollouts},
        }
        del data["policies"]
        print(render.dump(data, args.output), end="")
        return 0
    rows = [
        (label, *(r.metrics.get(k, "-") for k, _ in MAINTENANCE_COLUMNS), *(r.metrics[k] for k, _ in TRACE_COLUMNS))
        for label, r in rollouts
    ]
    headers = ("MAINTENANCE", *(h for _, h in MAINTENANCE_COLUMNS), *(h for _, h in TRACE_COLUMNS))
    print(render.table(headers, rows), end="")
    f = config.failures
    window = f", window {split_wait.format_duration(spec.window_s)}" if spec.window_s is not None else ""
    print(
        f"\nrollout from {split_wait.format_duration(spec.at_s)}, {split_wait.format_duration(spec.step_s)} per "
        f"domain, k={spec.k}, waits at most {split_wait.format_duration(spec.max_wait_s)}{window}; checkpoints every "
        f"{f.checkpoint_s / 60:g} min; runtime estimates {config.split_wait.runtime_estimate}; placement {names[0]}"
    )
    for label, r in rollouts:
        if "withinWindow" in r.metrics:
            print(f"{label}: {'within' if r.metrics['withinWindow'] else 'NOT within'} the window")
    return 0


def maintenance_report(spec: MaintenanceSettings, failures: FailureSettings) -> dict[str, Any]:
    """The rollout's settings as a report carries them (the runtime estimate is the split wait's, reported there)."""
    return {
        "atSeconds": spec.at_s,
        "stepSeconds": spec.step_s,
        "k": spec.k,
        "maxWaitSeconds": spec.max_wait_s,
        "windowSeconds": spec.window_s,
        "checkpointMinutes": failures.checkpoint_s / 60,
        "restartMinutes": failures.restart_s / 60,
    }


def failure_report(config: SimConfig, args: argparse.Namespace) -> dict[str, Any]:
    """The failure and spare settings a report ran with (nothing when nodes never failed and no spares were held)."""
    spares = read_spare_nodes(args.spare_nodes_per_domain)
    out: dict[str, Any] = {"spareNodesPerDomain": spares} if spares else {}
    f = config.failures
    if f is not None and math.isfinite(f.node_mtbf_h):
        out["failures"] = {
            "nodeMtbfHours": f.node_mtbf_h,
            "repairHours": f.repair_h,
            "checkpointMinutes": f.checkpoint_s / 60,
            "restartMinutes": f.restart_s / 60,
            "policy": f.policy or "auto",
        }
    return out


def rank_by_slowdown(
    make_fleet: Callable[[], Fleet],
    jobs: list[TraceJob],
    names: list[str],
    queue_objects: list[Any],
    config: SimConfig,
    values: list[float],
    *,
    seed: int,
) -> list[dict[str, Any]]:
    """For each slowdown value, the policies ordered by mean JCT when splits and block crossings cost that much."""
    out = []
    for value in values:
        swept = dataclasses.replace(config, split_slowdown=value, block_slowdown=value)
        jct = {}
        for name in names:
            r = simulate(
                make_fleet, jobs, name, queue_objects=queue_objects, config=swept, seed=seed,
                progress=progress_bar(f"{name} @{value:g}"),
            )  # fmt: skip
            jct[name] = r.metrics["meanJctSeconds"]
        order = sorted(names, key=lambda n: (jct[n], names.index(n)))
        out.append(
            {
                "slowdown": value,
                "order": order,
                "meanJctSeconds": jct,
                "text": " < ".join(f"{n} ({jct[n]:.0f})" for n in order),
            }
        )
    return out


def report(runs: list[Run], args: argparse.Namespace) -> dict[str, Any]:
    first = runs[0].simulation
    return {
        "trace": args.trace,
        "fleet": str(args.fleet),
        "quota": args.quota,
        "topologyRequest": args.topology_request,
        "splitSlowdown": args.split_slowdown,
        "blockSlowdown": args.block_slowdown,
        "splitModel": args.split_model,
        "splitWait": {
            "factor": args.split_wait,
            "maxSeconds": parse_duration(args.split_wait_max, path="--split-wait-max"),
            "runtimeEstimate": args.runtime_estimate,
            "holds": args.split_wait_holds,
            "clock": args.split_wait_clock,
            "splitSlowdown": first.config.split_wait.split_slowdown,
            "policies": [r.policy for r in runs if r.simulation.hold is not None],
        },
        **failure_report(first.config, args),
        "queueOf": first.queues.queue_of,
        "policies": {r.policy: r.metrics for r in runs},
    }

"""``kilter simulate``: replay a trace on a fleet under placement and quota policies, and compare them.

The flags are parsed here and run here for a comparison of policies; reading the inputs and settings is
``simulate_inputs``'s, the tables and report ``simulate_report``'s, and ``--regions`` and ``--maintenance`` run in
``simulate_regions`` and ``simulate_maintenance``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kilter.cli import render, sources
from kilter.cli.simulate_inputs import one_fleet_inputs, policies, progress_bar, sim_config, sweep_values
from kilter.cli.simulate_maintenance import run_maintenance
from kilter.cli.simulate_regions import run_regions
from kilter.cli.simulate_report import COLUMNS, FAILURE_COLUMNS, class_table, report, versus_kilter
from kilter.cli.spare_flag import add_spare_argument
from kilter.model.errors import InputError
from kilter.sim import synthetic
from kilter.sim.engine import SPLIT_MODELS, SimConfig
from kilter.sim.failure_model import DEFAULT_RESTART_S, FAILURE_POLICIES
from kilter.sim.plot import Drawn, plot_runs
from kilter.sim.policies import POLICIES
from kilter.sim.run import Run, simulate
from kilter.sim.split_hold import RUNTIME_ESTIMATES, WAIT_CLOCKS, WAIT_HOLDS, WAIT_PRICES
from kilter.sim.trace import TraceJob
from kilter.topology import split_wait
from kilter.topology.fleet import Fleet

__all__ = ["add_parser", "rank_by_slowdown", "run"]


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
        help="trace CSV (Philly: timestamp,duration,num_gpus,gpu_time,cluster; submit_time,duration,gpus[,queue]; "
        "or a Helios cluster_log.csv)"
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
        "--split-wait-price",
        choices=WAIT_PRICES,
        default="queue",
        help="what a split is priced by: queue (default: its own slowdown and, while jobs have queued all along "
        "over its expected run, what it takes from them, which no wait outprices) or own (its own slowdown only)",
    )
    p.add_argument(
        "--reservations",
        choices=("on", "off"),
        default="off",
        help="kilter only: on gives the oldest waiting gang of each ClusterQueue a reservation on the domains "
        "expected to free soonest, unless jobs have queued all along its expected run, and lets other jobs start "
        "only where they delay it (backfill); off (default, as kilter serve's extender does today): none",
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
    p.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="draw mean waits by job class, the queue over time, per-queue share",
    )
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
    jobs, queue_objects, make_fleet = one_fleet_inputs(args)
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
        plot_runs([(r.policy, Drawn.of(r.simulation, r.metrics)) for r in runs], args.plot, title=title)
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

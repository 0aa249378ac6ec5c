"""``kilter simulate --regions``: the trace split over regions, each dispatcher run in turn (``kilter.sim.regions``),
and its table."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from kilter.cli import render, sources
from kilter.cli.simulate_inputs import load_fleet, load_jobs, policies, sim_config, with_spares
from kilter.cli.spare_flag import read_spare_nodes
from kilter.model.errors import InputError
from kilter.sim import region_split
from kilter.sim.regions import DISPATCHERS, Region, RegionRun, simulate_regions
from kilter.state import snapshot

__all__ = ["REGION_COLUMNS", "REGION_TAIL", "run_regions"]


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

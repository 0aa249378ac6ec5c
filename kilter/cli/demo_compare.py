"""``kilter demo``'s main job: the same workload under kilter and under what users run today, side by side.

What users run today, each set up as its operators recommend for rack-scale
NVLink: Kueue TAS (required rack for a gang one rack holds, else rack
slices) and Slurm's backfill over ``topology/block``. The report sets kilter
against the better of the two figure by figure (``metrics.versus_best``),
and says where kilter trails as plainly as where it leads.

The embedded demo fleet, idle (32 GB200 NVL72 racks with failed and
label-less trays, 16 MI355X nodes), the demo cluster's Kueue queues (four
ClusterQueues in a cohort tree), and a Philly-like workload from kilter's
generator with gangs eight times the size (or ``--trace`` for a real trace):
loaded enough that jobs queue and big gangs meet a fleet too busy for one
rack, which is where placement decides how long everyone waits.
The kilter column is not the planner called in-process: a real ``kilter
serve`` runs on 127.0.0.1 and every pod goes through its HTTP extender
verbs as kube-scheduler sends them. The baselines run in-process on the same
simulator. The answer is a table and a PNG.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from kilter.cli import render, simulate_inputs, simulate_report
from kilter.cli.demo_scheduler import ExtenderPlacement, ExtenderServer
from kilter.cli.sources import DEMO_QUEUES
from kilter.sim import fleetspec, run
from kilter.sim.engine import Progress, SimConfig, Simulation
from kilter.sim.metrics import versus_best
from kilter.sim.placement import PlacementPolicy
from kilter.sim.plot import Drawn, plot_runs
from kilter.sim.trace import TraceJob
from kilter.state import snapshot
from kilter.topology import fleetgen

__all__ = ["DEMO_POLICIES", "add_arguments", "demo_objects", "print_comparison", "run_comparison", "short_verdict"]

DEMO_POLICIES = ("kilter", "kueue-tas", "slurm")
DEMO_JOBS = 3000
DEMO_GPU_SCALE = 8
IDLE_DEMO_FLEET = dataclasses.replace(
    fleetgen.DEMO_FLEET, pools=tuple(dataclasses.replace(p, usage=0.0) for p in fleetgen.DEMO_FLEET.pools)
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", help="a trace CSV to replay instead of the generated Philly-like workload")
    p.add_argument("--jobs", type=int, default=DEMO_JOBS, help=f"jobs to replay (default {DEMO_JOBS})")
    p.add_argument(
        "--gpu-scale",
        type=int,
        default=DEMO_GPU_SCALE,
        help=f"multiply every job's GPUs by K (default {DEMO_GPU_SCALE})",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the generated workload")
    p.add_argument(
        "--plot", type=Path, default=Path("kilter-demo.png"), help="where to draw the PNG (default kilter-demo.png)"
    )


def demo_objects() -> list[dict[str, Any]]:
    """The idle demo fleet as a cluster would list it: Nodes and the Kueue Topology."""
    nodes, _ = fleetgen.generate(IDLE_DEMO_FLEET)
    return [*nodes, fleetgen.topology_object()]


def run_comparison(args: argparse.Namespace) -> dict[str, Any]:
    """Run every demo policy; print progress; return the report (policies' metrics, the PNG's path).

    The baselines run in a process of their own while kilter answers over
    HTTP here: kilter's run mostly waits on its server, so on two cores the
    demo takes about as long as kilter's run alone.
    """
    jobs: list[TraceJob] = simulate_inputs.load_jobs(
        args.trace or "synthetic:philly", gpu_scale=args.gpu_scale, time_scale=1.0, limit=args.jobs, seed=args.seed
    )
    objects = demo_objects()
    report: dict[str, Any] = {
        "jobs": len(jobs),
        "trace": args.trace or "synthetic:philly",
        "gpuScale": args.gpu_scale,
        "policies": {},
    }
    drawn: dict[str, Drawn] = {}
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        baselines = pool.submit(_baselines, jobs, objects, args.seed)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "demo-fleet.json"
            path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
            with ExtenderServer(path) as server:
                policy = ExtenderPlacement(server)
                progress = simulate_inputs.progress_bar("kilter (HTTP)")
                found, sim = _run(policy, jobs, objects, args.seed, progress)
                found["extenderCalls"] = policy.calls
                policy.close()
        report["policies"]["kilter"], drawn["kilter"] = found, Drawn.of(sim, found)
        report["queueOf"] = sim.queues.queue_of
        for name, (found, picture) in baselines.result().items():
            report["policies"][name], drawn[name] = found, picture
    report["versus"] = versus_best(report["policies"], ours="kilter", others=list(DEMO_POLICIES[1:]))
    if args.plot:
        title = f"{len(jobs)} jobs on the demo fleet: kilter against Kueue TAS and Slurm as recommended for NVL72"
        if report["versus"]:
            title += "\n" + short_verdict(report["versus"])
        plot_runs([(name, drawn[name]) for name in DEMO_POLICIES], args.plot, title=title)
        report["plot"] = str(args.plot)
    return report


def _run(
    policy: PlacementPolicy | str,
    jobs: list[TraceJob],
    objects: list[dict[str, Any]],
    seed: int,
    progress: Progress | None,
) -> tuple[dict[str, Any], Simulation]:
    """One policy over the demo: its metrics (with its wall time) and the simulation, for the picture."""
    started = time.perf_counter()
    r = run.simulate(
        lambda: fleetspec.fleet_from_objects(objects),
        jobs,
        policy,
        queue_objects=snapshot.load_documents(DEMO_QUEUES),
        config=SimConfig(fair=True),
        seed=seed,
        progress=progress,
    )
    r.metrics["wallSeconds"] = round(time.perf_counter() - started, 1)
    return r.metrics, r.simulation


def _baselines(
    jobs: list[TraceJob], objects: list[dict[str, Any]], seed: int
) -> dict[str, tuple[dict[str, Any], Drawn]]:
    """Every demo policy but kilter, in a process of their own (``run_comparison``), without progress bars (kilter's
    is the one on the terminal): each one's metrics and what its picture needs."""
    out: dict[str, tuple[dict[str, Any], Drawn]] = {}
    for name in DEMO_POLICIES[1:]:
        found, sim = _run(name, jobs, objects, seed, None)
        out[name] = (found, Drawn.of(sim, found))
    return out


def short_verdict(versus: dict[str, Any]) -> str:
    """``versus_best``'s figures in a picture title's two lines: each ratio and whom it is against, then the
    verdict."""
    parts = []
    for key, label in (
        ("meanJctSeconds", "mean JCT"),
        ("oneDomainWait", "1-domain wait"),
        ("multiDomainWait", "multi-domain wait"),
    ):
        ratio = versus[key]["ratio"]
        parts.append(f"{label} {ratio:.3g}x {versus[key]['best']}" if ratio is not None else f"{label} vs 0 s")
    behind = versus["behind"]
    verdict = "kilter leads or ties on all three" if not behind else f"kilter trails on {', '.join(behind)}"
    return "kilter / best other: " + ", ".join(parts) + f"\n{verdict}"


def print_comparison(report: dict[str, Any]) -> None:
    rows = [(name, *(m[k] for k, _ in simulate_report.COLUMNS)) for name, m in report["policies"].items()]
    print(
        f"{report['jobs']} jobs of {report['trace']} (GPUs x{report['gpuScale']}) on the idle demo fleet, "
        "the demo cluster's four Kueue queues with fair sharing; kilter answered over HTTP by a real kilter serve\n"
    )
    print(render.table(("POLICY", *(h for _, h in simulate_report.COLUMNS)), rows), end="")
    classes = [
        (name, *(m["classes"][key][k] for key, _ in simulate_report.CLASSES for k, _ in simulate_report.CLASS_COLUMNS))
        for name, m in report["policies"].items()
    ]
    headers = ("POLICY", *(f"{c} {h}" for _, c in simulate_report.CLASSES for _, h in simulate_report.CLASS_COLUMNS))
    print("\nBy job class (1-DOMAIN: jobs one scale-up domain can hold; MULTI-DOMAIN: the rest):")
    print(render.table(headers, classes), end="")
    if report.get("versus"):
        print(f"\n{report['versus']['summary']}")
    if "plot" in report:
        print(f"\nmean waits by job class, the queue over time and each queue's share: {report['plot']}")
    sys.stdout.flush()

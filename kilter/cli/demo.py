"""``kilter demo``: what kilter buys on the embedded demo fleet (what ``make run`` shows).

By default, a Philly-like workload replayed under kilter (through a real
``kilter serve`` over HTTP) and under Kueue TAS and Slurm's backfill, each
set up as recommended for rack-scale NVLink, side by side
(``demo_compare``). With ``--plans``: the demo fleet (32 GB200 NVL72 racks
in 4 leaves, some trays down or without their clique label, 45 % busy; 16
MI355X nodes), the plan each example job in ``examples/jobs`` would get
right now, and the Kueue queues of ``examples/queues`` with their shares
and pending decisions.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kilter.cli import demo_compare, render, sources
from kilter.cli import plan as plan_cmd
from kilter.cli import queues as queues_cmd
from kilter.gangs import planning
from kilter.model.jobs import read_job
from kilter.state import cluster, snapshot
from kilter.topology.fleet import Fleet

__all__ = ["DEMO_JOBS", "add_parser", "run", "show_plans"]

DEMO_JOBS = Path(__file__).with_name("demo_jobs.yaml")
DEMO_NOW = 1_796_122_800.0  # 2026-12-01T11:00:00Z: the demo's clock, so its output never changes


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="kilter against Kueue TAS and Slurm on the embedded demo fleet",
        description="Replay a Philly-like workload on the embedded demo fleet under kilter (over HTTP, as "
        "kube-scheduler asks it), Kueue TAS and Slurm's backfill, each set up as recommended for NVL72 racks; "
        "no cluster needed. "
        "--plans shows the fleet, example plans and queues instead.",
    )
    p.add_argument("--plans", action="store_true", help="show the demo fleet, example plans and queues instead")
    demo_compare.add_arguments(p)
    p.add_argument(
        "--write-snapshot",
        type=Path,
        metavar="FILE",
        help="(with --plans) also write the demo fleet as a snapshot file for `kilter plan --snapshot`",
    )
    p.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    p.set_defaults(func=run)


def fleet_rows(fleet: Fleet) -> list[tuple[Any, ...]]:
    rows = []
    for name, s in fleet.summary().items():
        assert isinstance(s, dict)
        rows.append(
            (
                name,
                s["nodes"],
                s["domains"],
                s["detachedNodes"],
                s["gpus"],
                s["usableGpus"],
                s["idleGpus"],
                s["whollyIdleDomains"],
            )
        )
    return rows


def run(args: argparse.Namespace) -> int:
    if not args.plans and not args.write_snapshot:
        report = demo_compare.run_comparison(args)
        if args.output != "table":
            print(render.dump(report, args.output), end="")
        else:
            demo_compare.print_comparison(report)
        return 0
    return show_plans(args)


def show_plans(args: argparse.Namespace) -> int:
    objects = sources.demo_objects()
    state = cluster.from_objects(objects)
    fleet = state.fleet()
    if args.write_snapshot:
        doc = {"apiVersion": "v1", "kind": "List", "items": objects}
        args.write_snapshot.write_text(render.dump(doc, "yaml"))
        print(f"wrote the demo fleet to {args.write_snapshot}", file=sys.stderr)
    jobs = [read_job(doc) for doc in snapshot.load_documents(DEMO_JOBS)]
    results = [(job, planning.plan_job(fleet, job)) for job in jobs]
    queues = queues_cmd.queues_data(state, now=DEMO_NOW, pending=True)
    if args.output != "table":
        data = {
            "fleet": fleet.summary(),
            "levels": fleet.levels.source,
            "plans": [planning.plan_to_dict(job, plans) for job, plans in results],
            "queues": queues,
        }
        print(render.dump(data, args.output), end="")
        return 0
    print(f"Demo fleet (topology levels from {fleet.levels.source})\n")
    print(
        render.table(
            ("PLATFORM", "NODES", "DOMAINS", "DETACHED", "GPUS", "USABLE", "IDLE", "WHOLLY IDLE DOMAINS"),
            fleet_rows(fleet),
        )
    )
    for job, plans in results:
        print()
        print(plan_cmd.render_plans(fleet, job, plans), end="")
    print("\nKueue queues of the demo cluster (examples/queues), with the pending workloads' fate\n")
    print(queues_cmd.render_table(queues), end="")
    return 0

"""``kilter plan``: the placement plan a job would get on a cluster or snapshot."""

from __future__ import annotations

import argparse
from collections import OrderedDict
from pathlib import Path
from typing import Any

from kilter.cli import render, sources
from kilter.model.errors import InputError
from kilter.model.jobs import JobSpec, read_job
from kilter.state import snapshot
from kilter.topology.fleet import Fleet
from kilter.topology.plan import Plan, commit, gang_request, plan_gang

__all__ = ["add_parser", "plan_job", "plan_to_dict", "render_plans", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "plan",
        help="the placement plan a job would get",
        description="Plan where every pod of a job would run, without changing anything.",
    )
    p.add_argument(
        "--job",
        required=True,
        type=Path,
        help="job manifest: Job, JobSet, PyTorchJob, MPIJob, "
        "LeaderWorkerSet, RayJob, Volcano Job, Kueue Workload or Pod (YAML or JSON)",
    )
    p.add_argument("--platform", help="plan only on this platform (name or alias from the catalog)")
    sources.add_source_arguments(p)
    p.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    p.set_defaults(func=run)


def read_job_file(path: Path) -> JobSpec:
    docs = snapshot.load_documents(path)
    if len(docs) != 1:
        raise InputError(f"{path} must hold exactly one job object, found {len(docs)}")
    return read_job(docs[0])


def plan_job(fleet: Fleet, job: JobSpec, *, platform: str | None = None) -> list[Plan]:
    """Plan each gang of the job in turn; a feasible gang's pods are booked before the next."""
    plans = []
    for i, pod_sets in enumerate(job.gangs):
        name = job.name if len(job.gangs) == 1 else f"{job.name}/group-{i}"
        plan = plan_gang(fleet, gang_request(name, pod_sets, fleet.catalog, platform=platform))
        if plan.feasible and len(job.gangs) > 1:
            commit(fleet, plan)
        plans.append(plan)
    return plans


def _gang_dict(plan: Plan) -> dict[str, Any]:
    return {
        "gang": plan.gang,
        "feasible": plan.feasible,
        "reason": plan.reason,
        "platform": plan.platform,
        "podSets": [
            {"name": ps.name, "count": ps.count, "gpusPerPod": ps.gpus_per_pod, "nodes": list(ps.nodes)}
            for ps in plan.pod_sets
        ],
        "domains": list(plan.domains),
        "blocks": list(plan.groups),
        "ignoredPodSets": list(plan.ignored),
    }


def plan_to_dict(job: JobSpec, plans: list[Plan]) -> dict[str, Any]:
    gangs = [_gang_dict(p) for p in plans]
    return {
        "job": {"kind": job.kind, "name": job.name, "namespace": job.namespace},
        "feasible": all(p.feasible for p in plans),
        "reason": "; ".join(p.reason for p in plans),
        "platform": next((p.platform for p in plans if p.platform), None),
        "podSets": [ps for g in gangs for ps in g["podSets"]],
        "domains": sorted({d for p in plans for d in p.domains}),
        "blocks": sorted({b for p in plans for b in p.groups}),
        "ignoredPodSets": sorted({n for p in plans for n in p.ignored}),
        "gangs": gangs,
    }


def render_plans(fleet: Fleet, job: JobSpec, plans: list[Plan]) -> str:
    """The plan for people: one line per gang, then pod sets by domain with compressed node names."""
    out = []
    title = f"{job.kind} {job.namespace + '/' if job.namespace else ''}{job.name}"
    for plan in plans:
        state = "PLACED" if plan.feasible else "DOES NOT FIT"
        out.append(f"{title if len(plans) == 1 else plan.gang}: {state} - {plan.reason}\n")
        if not plan.feasible:
            continue
        rows = []
        for ps in plan.pod_sets:
            by_domain: OrderedDict[str, list[str]] = OrderedDict()
            for node in ps.nodes:
                by_domain.setdefault(fleet.domain_of_node(fleet.node_index[node]), []).append(node)
            for domain, nodes in by_domain.items():
                rows.append((ps.name, len(nodes), ps.gpus_per_pod, _short(domain), render.compress_names(nodes)))
        out.append(render.table(("POD SET", "PODS", "GPUS/POD", "DOMAIN", "NODES"), rows))
        if plan.groups:
            out.append(f"{plan.group_level}: {', '.join(plan.groups)}\n")
    return "".join(out)


def _short(domain: str) -> str:
    return domain if len(domain) <= 24 else f"{domain[:8]}…{domain[-12:]}"


def run(args: argparse.Namespace) -> int:
    state = sources.load_state(args)
    job = read_job_file(args.job)
    fleet = state.fleet()
    plans = plan_job(fleet, job, platform=args.platform)
    sources.print_warnings(state)
    if args.output == "table":
        print(render_plans(fleet, job, plans), end="")
    else:
        print(render.dump(plan_to_dict(job, plans), args.output), end="")
    return 0 if all(p.feasible for p in plans) else 1

"""``kilter plan``: the placement plan a job would get on a cluster or snapshot.

A preferred gang whose plan spans more scale-up domains than it needs may
wait for fewer first (``kilter.gangs.waits``, as ``kilter serve`` decides at
``--now``, by default the clock; a job without ``metadata.creationTimestamp``
is taken as created then): it is shown ``WAITS`` with the reason, then the
plan it would take once its wait is over. A waiting gang is not a failure
(exit 0); a gang that does not fit is (exit 1). The plan itself comes from
``kilter.gangs.planning``, which the gRPC ``Plan`` answers with too.

When the job would start: ``--now`` when it can start then; else the
reservation it would get queued behind every pending gang of the cluster
(``kilter.gangs.expected_starts``): ``expectedStart`` and
``reservedDomains``, or no start and ``expectedStartReason``.
"""

from __future__ import annotations

import argparse
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kilter.cli import render, sources
from kilter.cli.spare_flag import add_spare_argument, read_spare_nodes
from kilter.cli.split_wait_flags import add_split_wait_arguments, read_split_wait
from kilter.gangs.expected_starts import ExpectedStarts, expected_starts, plan_start
from kilter.gangs.planning import plan_job_waits, plan_to_dict
from kilter.gangs.waits import NO_WAIT, Waits
from kilter.model.errors import InputError
from kilter.model.jobs import JobSpec, PodSetSpec, read_job
from kilter.quota.runtimes import WINDOW
from kilter.state import snapshot
from kilter.state.cluster import ClusterState
from kilter.topology.fleet import Fleet
from kilter.topology.plan import GangRequest, Plan
from kilter.topology.split_wait import SplitWait, WaitDecision

__all__ = ["add_parser", "answer", "job_object_of", "read_job_object", "render_plans", "run"]


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
    p.add_argument(
        "--now",
        metavar="RFC3339",
        help="judge a preferred gang's wait for fewer domains at this time (default: now), e.g. 2026-12-01T10:00:00Z",
    )
    add_split_wait_arguments(p)
    add_spare_argument(p)
    sources.add_source_arguments(p)
    p.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    p.set_defaults(func=run)


def read_job_file(path: Path) -> JobSpec:
    return read_job(read_job_object(path))


def read_job_object(path: Path) -> Mapping[str, Any]:
    return _one_job(snapshot.load_documents(path), str(path))


def job_object_of(text: str, *, source: str) -> Mapping[str, Any]:
    """The one job object of a manifest's text (YAML or JSON), as ``read_job_object`` reads it from a file."""
    return _one_job(snapshot.parse_documents(text, source=source), source)


def _one_job(docs: list[Any], source: str) -> Mapping[str, Any]:
    if len(docs) != 1 or not isinstance(docs[0], Mapping):
        raise InputError(f"{source} must hold exactly one job object, found {len(docs)}")
    return docs[0]


def render_plans(
    fleet: Fleet, job: JobSpec, plans: list[Plan], waits: Sequence[WaitDecision] = (), *, start: str = ""
) -> str:
    """The plan for people: one line per gang, then pod sets by domain with compressed node names; a gang that
    waits for fewer domains says so, then shows the plan it would take once its wait is over; ``start`` (when it
    would start, for a job that cannot now) before the spares line."""
    out = []
    title = f"{job.kind} {job.namespace + '/' if job.namespace else ''}{job.name}"
    for plan, wait in zip(plans, list(waits) or [NO_WAIT] * len(plans), strict=True):
        state = "WAITS" if wait.wait else "PLACED" if plan.feasible else "DOES NOT FIT"
        out.append(f"{title if len(plans) == 1 else plan.gang}: {state} - {wait.reason or plan.reason}\n")
        if wait.wait:
            out.append(f"then: {plan.reason}\n")
        if not plan.feasible:
            continue
        rows = []
        for ps in plan.pod_sets:
            by_domain: OrderedDict[str, list[str]] = OrderedDict()
            for node in ps.nodes:
                by_domain.setdefault(fleet.domain_of_node(fleet.node_index[node]), []).append(node)
            for domain, nodes in by_domain.items():
                shown = fleet.domain_name(domain)
                rows.append((ps.name, len(nodes), ps.gpus_per_pod, shown, render.compress_names(nodes)))
        out.append(render.table(("POD SET", "PODS", "GPUS/POD", "DOMAIN", "NODES"), rows))
        if plan.groups:
            out.append(f"{plan.group_level}: {', '.join(plan.groups)}\n")
    held = render.spares_line(fleet)
    return "".join(out) + start + (f"{held}\n" if held else "")


def answer(
    state: ClusterState,
    fleet: Fleet,
    obj: Mapping[str, Any],
    *,
    now_s: float,
    rule: SplitWait,
    platform: str | None,
    output: str,
    starts: Callable[[], ExpectedStarts] | None = None,
    window: int = WINDOW,
) -> tuple[str, int]:
    """What ``kilter plan`` prints for the job ``obj`` on ``fleet`` (of ``state``), and its exit code; shared with
    ``kubectl kilter plan``. ``fleet`` is not changed. ``starts`` gives the pending gangs' expected starts a job
    that cannot start now queues behind (default: worked out from ``state``; a running kilter's recent answer);
    ``window`` how many finished Workloads per size class runtimes are learned from (a running kilter's own)."""
    job = read_job(obj)
    waits = Waits.of_state(state, rule, now_s=now_s, window=window)

    def wait(pod_sets: Sequence[PodSetSpec], request: GangRequest, plan: Plan) -> WaitDecision:
        templates = [ps.template for ps in pod_sets]
        return waits.for_object(obj, templates, request, plan, fleet, created_s=now_s)

    planned = plan_job_waits(fleet, job, platform=platform, wait=wait, keep=False)
    plans, decisions = [p for p, _ in planned], [w for _, w in planned]
    start = plan_start(
        obj,
        fleet,
        now_s=now_s,
        starts_now=all(p.feasible for p in plans) and not any(w.wait for w in decisions),
        starts=starts or (lambda: expected_starts(state, now_s=now_s, fleet=fleet, learned=waits.learned)),
        state=state,
        learned=waits.learned,
    )
    if output == "table":
        text = render_plans(fleet, job, plans, decisions, start=_start_line(start))
    else:
        text = render.dump({**plan_to_dict(job, plans, decisions), **start}, output)
    return text, 0 if all(p.feasible for p in plans) else 1


def _start_line(start: Mapping[str, Any]) -> str:
    """``expected start: T on DOMAINS`` for a job that cannot start now ("" for one that can: it is placed)."""
    if not start["expectedStartReason"]:
        return ""
    if start["expectedStart"] is None:
        return f"expected start: none - {start['expectedStartReason']}\n"
    where = ", ".join(start["reservedDomains"])
    return f"expected start: {start['expectedStart']}{f' on {where}' if where else ''}\n"


def run(args: argparse.Namespace) -> int:
    now_s = sources.now_of(args)
    rule = read_split_wait(args)
    spare_nodes = read_spare_nodes(args.spare_nodes_per_domain, sources.load_catalog(args))
    state = sources.load_state(args)
    state.spare_nodes_default = spare_nodes
    obj = read_job_object(args.job)
    text, code = answer(state, state.fleet(), obj, now_s=now_s, rule=rule, platform=args.platform, output=args.output)
    sources.print_warnings(state)
    print(text, end="")
    return code

"""``kilter maintenance plan`` and ``drain``: take scale-up domains out of service losing the least work (#23).

``plan`` reads the cluster (or a snapshot), weighs what runs on the chosen
domains (``lifecycle.works``) and asks ``topology.maintenance`` for the
order and timing that lose the fewest GPU-hours, next to a rolling drain in
name order. Its ``-o json|yaml`` output is the plan document ``drain`` runs
(``lifecycle.plan_doc``); ``drain`` carries it out step by step against the
API server (``lifecycle.drain``), resumable after a restart.

Exit codes: 0 done (``plan``: always, when it could plan; ``drain --dry-run``:
when the next round would go on), 1 a drain stopped (its reason printed; run
it again to resume), 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from kilter.cli import render, sources
from kilter.kube.api import CLI_AGENT, connect
from kilter.lifecycle.drain import Drain, DrainSettings
from kilter.lifecycle.plan_doc import MAX_SECONDS, PlanDoc, plan_document, read_plan
from kilter.lifecycle.replan import live_replanner
from kilter.lifecycle.works import fleet_work
from kilter.model.durations import parse_duration
from kilter.model.errors import InputError
from kilter.quota.policy import parse_time
from kilter.state import snapshot
from kilter.state.store import ClusterStore
from kilter.topology import domain_names
from kilter.topology.maintenance import MaintenanceAsk, plan_maintenance
from kilter.topology.split_wait import format_duration

__all__ = ["add_parser", "node_selector", "run_drain", "run_plan"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("maintenance", help="plan and run drains of scale-up domains: kilter maintenance plan|drain")
    verbs = p.add_subparsers(dest="verb", required=True)
    pl = verbs.add_parser(
        "plan",
        help="which jobs a drain of some domains would hit, and the order and timing that lose least",
        description=(
            "Per step, the domains taken out (at most --max-unavailable-domains at once), when each drains, the "
            "jobs it waits for and those it evicts with their GPU-hours at risk; beside it, a rolling drain in "
            "name order. -o json or yaml prints the plan document 'kilter maintenance drain' runs."
        ),
    )
    sources.add_source_arguments(pl, live=True)
    target = pl.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--domains",
        help="comma-separated scale-up domains as kubectl kilter domains names them (or full ids, or unique "
        "prefixes), e.g. 0cb1e29c,0fd630f1 on the demo",
    )
    target.add_argument("--nodes", help="a label selector (k=v,k!=v,k): the nodes to maintain, step by domain")
    target.add_argument("--all-domains", action="store_true", help="every GPU domain: a rollout")
    pl.add_argument("--max-unavailable-domains", type=int, default=1, help="domains out at once (default 1)")
    pl.add_argument("--window", help="START/DURATION: the maintenance window (START RFC 3339 or 'now'), e.g. now/12h")
    pl.add_argument(
        "--step-duration", default="2h", help="how long a domain is out once drained, re-qualification included"
    )
    pl.add_argument("--max-wait", default="6h", help="the longest a step waits for jobs to end (default 6h)")
    pl.add_argument(
        "--preemptible-below",
        type=int,
        default=0,
        help="jobs whose pods' priority is below this are preemptible: evicted freely (default 0)",
    )
    pl.add_argument("--now", help="plan as of this time (RFC 3339; default: the clock), for snapshots")
    pl.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    pl.set_defaults(func=run_plan)

    dr = verbs.add_parser(
        "drain",
        help="run a plan step by step: cordon, wait, evict (PodDisruptionBudgets honoured), maintain, re-qualify",
        description=(
            "Runs the plan 'kilter maintenance plan -o json' wrote, against the cluster. Progress is kept on the "
            "nodes (annotation kilter.dev/maintenance-progress): run it again to resume. The maintenance tooling "
            "labels a node kilter.dev/maintenance-done=true when done; the burn-in tooling "
            "kilter.dev/qualification=passed. "
            "Exit 1 when it stops (the reason is printed), 0 when every step is done."
        ),
    )
    dr.add_argument("plan", type=Path, help="the plan document (JSON or YAML)")
    src = dr.add_mutually_exclusive_group(required=True)
    src.add_argument("--kubeconfig", type=Path, help="the cluster this kubeconfig points at")
    src.add_argument("--in-cluster", action="store_true", help="the cluster kilter's pod runs in")
    dr.add_argument("--context", help="kubeconfig context (default: its current-context)")
    dr.add_argument("--platforms", type=Path, help="YAML file adding or overriding catalog platforms")
    sources.add_health_argument(dr)
    dr.add_argument("--poll", default="10s", help="time between rounds (default 10s)")
    dr.add_argument("--eviction-timeout", default="10m", help="how long a refused eviction is retried (10m)")
    dr.add_argument("--suite", default="", help="the qualification suite that must pass (default: any)")
    dr.add_argument("--dry-run", action="store_true", help="say what the next round would do; write nothing")
    dr.add_argument(
        "--replan",
        action="store_true",
        help="before each step, plan the domains left again from the cluster as it is now (for long rollouts)",
    )
    dr.set_defaults(func=run_drain)


def node_selector(text: str) -> list[tuple[str, str, str | None]]:
    """``k=v``, ``k==v``, ``k!=v`` and ``k`` (exists) terms, comma-separated, as (key, operator, value)."""
    terms: list[tuple[str, str, str | None]] = []
    for raw in text.split(","):
        term = raw.strip()
        if not term:
            raise InputError(f"--nodes: empty term in {text!r}")
        for op in ("!=", "==", "="):
            if op in term:
                key, value = term.split(op, 1)
                terms.append((key.strip(), "!=" if op == "!=" else "=", value.strip()))
                break
        else:
            terms.append((term, "exists", None))
        if not terms[-1][0]:
            raise InputError(f"--nodes: a term without a key in {text!r}")
    return terms


def _matches(labels: Mapping[str, str], terms: list[tuple[str, str, str | None]]) -> bool:
    for key, op, value in terms:
        if op == "exists" and key not in labels:
            return False
        if op == "=" and labels.get(key) != value:
            return False
        if op == "!=" and labels.get(key) == value:
            return False
    return True


def _chosen_nodes(args: argparse.Namespace, store: ClusterStore) -> list[str] | None:
    fleet = store.fleet()
    if args.all_domains:
        return None
    if args.nodes is not None:
        terms = node_selector(args.nodes)
        picked = [n for i, n in enumerate(fleet.node_names) if _matches(fleet.node_labels[i], terms)]
        if not picked:
            raise InputError(f"--nodes {args.nodes!r} selects no GPU node")
        return picked
    given = [d.strip() for d in args.domains.split(",") if d.strip()]
    if not given:
        raise InputError("--domains: no GPU domain given")
    names = fleet.domain_names()
    try:
        wanted = {domain_names.resolve(d, fleet.domain_ids, names) for d in given}
    except InputError as exc:
        raise InputError(f"--domains: {exc}") from None
    return [n for i, n in enumerate(fleet.node_names) if fleet.domain_of_node(i) in wanted]


def _window(args: argparse.Namespace, now_s: float) -> tuple[float, float | None]:
    if not args.window:
        return now_s, None
    start, sep, length = args.window.partition("/")
    if not sep:
        raise InputError(f"--window {args.window!r}: START/DURATION, e.g. now/12h or 2026-12-06T22:00:00Z/8h")
    begin = now_s if start.strip() == "now" else parse_time(start.strip(), path="--window")
    return begin, begin + _positive(length, "--window")


def _seconds(text: str, flag: str, *, least: float = 0.0) -> float:
    """A duration flag, within what a maintenance can be (over ``least``, at most a year)."""
    seconds = parse_duration(text, path=flag)
    if seconds < least or (least > 0 and seconds == 0):
        raise InputError(f"{flag} must be longer than 0s")
    if seconds > MAX_SECONDS:
        raise InputError(f"{flag} {text!r} is longer than a year")
    return seconds


def _positive(text: str, flag: str) -> float:
    return _seconds(text, flag, least=1e-9)


def run_plan(args: argparse.Namespace) -> int:
    if args.max_unavailable_domains < 1:
        raise InputError("--max-unavailable-domains must be at least 1")
    now_s = parse_time(args.now, path="--now") if args.now else sources.now_of(args)
    start_s, window_end = _window(args, now_s)
    step_s = _positive(args.step_duration, "--step-duration")
    max_wait = _seconds(args.max_wait, "--max-wait")
    store = sources.load_store(args)
    work = fleet_work(store, now_s=now_s, nodes=_chosen_nodes(args, store), preemptible_below=args.preemptible_below)
    ask = MaintenanceAsk(work.domain_gpus, start_s, step_s, args.max_unavailable_domains, max_wait, window_end)
    plan = plan_maintenance(ask, work.works)
    doc = plan_document(plan, ask, work, created_s=now_s, preemptible_below=args.preemptible_below)
    for problem in doc.problems:
        print(f"warning: {problem}", file=sys.stderr)
    if args.output != "table":
        print(render.dump(_to_builtins(doc), args.output), end="")
        return 0
    print(_plan_table(doc, start_s, store.fleet().domain_name))
    return 0


def _to_builtins(doc: PlanDoc) -> Any:
    return msgspec.to_builtins(doc)


def _plan_table(doc: PlanDoc, start_s: float, name: Callable[[str], str]) -> str:
    rows = []
    for step in doc.steps:
        for d in step.domains:
            gpus = sum(e.gpus for e in d.evicts)
            evicts = f"{len(d.evicts)} jobs, {gpus} GPUs" if d.evicts else "-"
            waits = f"{len(d.waits_for)} jobs" if d.waits_for else "-"
            rows.append(
                (
                    step.step,
                    name(d.domain),
                    len(d.nodes),
                    d.drain,
                    d.back,
                    waits,
                    evicts,
                    f"{d.lost_gpu_hours:.1f}",
                )
            )
    headers = ("STEP", "DOMAIN", "NODES", "DRAIN", "BACK", "WAITS FOR", "EVICTS", "GPU-H LOST")  # -o yaml: the jobs
    took = parse_time(doc.end, path="end") - start_s
    naive_took = parse_time(doc.naive.end, path="naive.end") - start_s
    lines = [
        render.table(headers, rows),
        f"kilter ({doc.method}): {doc.lost_gpu_hours:.1f} GPU-hours lost, {doc.jobs_killed} jobs evicted, "
        f"{doc.idle_gpu_hours:.1f} GPU-hours idle while waiting, done in {format_duration(took)}",
        f"rolling drain in name order: {doc.naive.lost_gpu_hours:.1f} GPU-hours lost, {doc.naive.jobs_killed} jobs "
        f"evicted, done in {format_duration(naive_took)}",
    ]
    if doc.beyond_window:
        lines.append(f"steps {', '.join(map(str, doc.beyond_window))} end after the window ({doc.window_end})")
    return "\n".join(lines)


def run_drain(args: argparse.Namespace) -> int:
    try:
        docs = snapshot.load_documents(args.plan)
    except OSError as exc:
        raise InputError(f"{args.plan}: {exc.strerror or exc}") from exc
    if len(docs) != 1:
        raise InputError(f"{args.plan}: one plan document expected, found {len(docs)}")
    plan = read_plan(docs[0], where=str(args.plan))
    settings = DrainSettings(
        poll_s=_positive(args.poll, "--poll"),
        eviction_timeout_s=_seconds(args.eviction_timeout, "--eviction-timeout"),
        suite=args.suite,
        dry_run=args.dry_run,
    )
    catalog = sources.catalog_of(args.platforms)
    signals = sources.health_of(args.health_signals)
    api = connect(args.kubeconfig, context=args.context, user_agent=CLI_AGENT)
    drain = Drain(
        api,
        plan,
        device_resources=catalog.device_resources,
        settings=settings,
        signals=signals,
        say=lambda line: print(line, flush=True),
        replan=live_replanner(api, plan, catalog, signals) if args.replan else None,
    )
    outcome = drain.run()
    if outcome.done:
        print(f"plan {plan.id}: every step done")
        return 0
    return 0 if args.dry_run and outcome.reason.startswith("dry run") else 1

"""The maintenance plan as a document: what ``kilter maintenance plan -o json|yaml`` prints and ``drain`` runs.

A plan is written once and may be read days later, by another process, on
another machine: it carries everything the drain needs (each step's domains
and their nodes, when each domain drains, the jobs it waits for and those it
evicts) and its ``id``, which the drain writes on the nodes it works on so
that a restart resumes the same plan. Times are RFC 3339 (UTC), durations
whole seconds, GPU-hours rounded to 0.1; keys are camelCase as Kubernetes
objects spell theirs. Reading checks every field and names the one that is
wrong (``InputError``), so a hand-edited plan fails before anything is
touched.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

import msgspec

from kilter.lifecycle.works import FleetWork
from kilter.model.codec import convert
from kilter.model.errors import InputError
from kilter.quota.policy import parse_time
from kilter.topology.maintenance import MaintenanceAsk, MaintenancePlan, Work

__all__ = [
    "API_VERSION",
    "KIND",
    "MAX_SECONDS",
    "DomainDoc",
    "EvictionDoc",
    "PlanDoc",
    "StepDoc",
    "plan_document",
    "read_plan",
    "rfc3339",
]

API_VERSION = "kilter.dev/v1alpha1"
KIND = "MaintenancePlan"
MAX_SECONDS = 366 * 86400.0
"""The longest step, wait or window a plan takes: a year (what a maintenance is; also keeps times printable)."""


class EvictionDoc(msgspec.Struct, rename="camel", frozen=True):
    job: str
    pods: int
    gpus: int
    at_risk_gpu_hours: float
    preemptible: bool = False
    not_before: str | None = None  # its min-runtime guard: never evicted before this


class DomainDoc(msgspec.Struct, rename="camel", frozen=True):
    domain: str
    nodes: list[str]
    drain: str
    back: str
    waits_for: list[str] = []
    evicts: list[EvictionDoc] = []
    lost_gpu_hours: float = 0.0
    idle_gpu_hours: float = 0.0


class StepDoc(msgspec.Struct, rename="camel", frozen=True):
    step: int
    begin: str
    end: str
    domains: list[DomainDoc]


class NaiveDoc(msgspec.Struct, rename="camel", frozen=True):
    lost_gpu_hours: float
    jobs_killed: int
    end: str


class PlanDoc(msgspec.Struct, rename="camel", frozen=True):
    api_version: str
    kind: str
    id: str
    created: str
    start: str
    step_seconds: float
    max_wait_seconds: float
    max_unavailable_domains: int
    method: str
    lost_gpu_hours: float
    idle_gpu_hours: float
    jobs_killed: int
    end: str
    naive: NaiveDoc
    steps: list[StepDoc]
    window_end: str | None = None
    preemptible_below: int = 0
    beyond_window: list[int] = []
    problems: list[str] = []

    def all_nodes(self) -> list[str]:
        return [n for s in self.steps for d in s.domains for n in d.nodes]


def rfc3339(unix_s: float) -> str:
    """Unix seconds as RFC 3339, UTC, whole seconds (as Kubernetes writes times)."""
    return dt.datetime.fromtimestamp(round(unix_s), tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _eviction(w: Work, at_s: float) -> EvictionDoc:
    guard = rfc3339(w.guarded_until_s) if w.guarded_until_s is not None else None
    return EvictionDoc(w.key, w.pods, w.gpus, round(w.at_risk_gpu_h(at_s), 1), w.preemptible, guard)


def plan_document(
    plan: MaintenancePlan, ask: MaintenanceAsk, work: FleetWork, *, created_s: float, preemptible_below: int = 0
) -> PlanDoc:
    """The document of ``plan`` (made from ``ask`` over ``work``), its id a digest of what it would do."""
    steps = [
        StepDoc(
            s.index,
            rfc3339(s.begin_s),
            rfc3339(s.end_s),
            [
                DomainDoc(
                    d.domain,
                    sorted(work.domain_nodes.get(d.domain, [])),
                    rfc3339(d.drain_s),
                    rfc3339(d.back_s),
                    list(d.waits_for),
                    [_eviction(w, d.drain_s) for w in d.evicts],
                    round(d.lost_gpu_h, 1),
                    round(d.idle_gpu_h, 1),
                )
                for d in s.domains
            ],
        )
        for s in plan.steps
    ]
    beyond = [s.index for s in plan.steps if ask.window_end_s is not None and s.end_s > ask.window_end_s]
    doc = PlanDoc(
        API_VERSION,
        KIND,
        "",
        rfc3339(created_s),
        rfc3339(ask.start_s),
        float(round(ask.step_s)),
        float(round(ask.max_wait_s)),
        ask.max_unavailable,
        plan.method,
        round(plan.lost_gpu_h, 1),
        round(plan.idle_gpu_h, 1),
        len(plan.killed),
        rfc3339(plan.end_s or ask.start_s),
        NaiveDoc(round(plan.naive_lost_gpu_h, 1), plan.naive_killed, rfc3339(plan.naive_end_s or ask.start_s)),
        steps,
        rfc3339(ask.window_end_s) if ask.window_end_s is not None else None,
        preemptible_below,
        beyond,
        list(work.problems),
    )
    digest = hashlib.sha256(msgspec.json.encode(doc)).hexdigest()[:12]  # every setting and step: two plans, two ids
    return msgspec.structs.replace(doc, id=digest)


def read_plan(data: Any, *, where: str) -> PlanDoc:
    """The plan in ``data`` (parsed JSON or YAML), checked; ``InputError`` naming the field that is wrong."""
    doc = convert(data, PlanDoc, path=where)
    if doc.api_version != API_VERSION or doc.kind != KIND:
        raise InputError(f"not a {API_VERSION} {KIND} (apiVersion {doc.api_version!r}, kind {doc.kind!r})", path=where)
    if not doc.id or not doc.steps:
        raise InputError("a plan needs an id and at least one step", path=where)
    if doc.max_unavailable_domains < 1:
        raise InputError("maxUnavailableDomains must be at least 1", path=f"{where}.maxUnavailableDomains")
    for key, value, least in (("stepSeconds", doc.step_seconds, 1.0), ("maxWaitSeconds", doc.max_wait_seconds, 0.0)):
        if not least <= value <= MAX_SECONDS:
            raise InputError(f"{value:g} is not from {least:g} to {MAX_SECONDS:g} seconds", path=f"{where}.{key}")
    seen: set[str] = set()
    domains: set[str] = set()
    for i, step in enumerate(doc.steps):
        at = f"{where}.steps[{i}]"
        if step.step != i:
            raise InputError(f"step {step.step} is listed {i}th: steps run in order", path=f"{at}.step")
        if not 1 <= len(step.domains) <= doc.max_unavailable_domains:
            raise InputError(
                f"{len(step.domains)} domains, not 1 to {doc.max_unavailable_domains}", path=f"{at}.domains"
            )
        for t in (step.begin, step.end):
            parse_time(t, path=at)
        for j, d in enumerate(step.domains):
            if d.domain in domains:
                raise InputError(f"domain {d.domain!r} is in two steps", path=f"{at}.domains[{j}].domain")
            domains.add(d.domain)
            for t in (d.drain, d.back):
                parse_time(t, path=f"{at}.domains[{j}]")
            for node in d.nodes:
                if not node or node in seen:
                    raise InputError(f"node {node!r} is empty or in two steps", path=f"{at}.domains[{j}].nodes")
                seen.add(node)
    for t in (doc.created, doc.start, doc.end, *((doc.window_end,) if doc.window_end else ())):
        parse_time(t, path=where)
    return doc

"""Re-planning a drain as it goes: the next step chosen from the cluster as it is now (``drain --replan``).

A plan made on Monday for a rollout that lasts till Thursday cannot know the
jobs that start on Tuesday on the domains it takes last; followed as
written, the drain would stop at each of them (a job the plan did not list).
Re-planning lists the cluster before each step, weighs what runs now on the
domains left, with the plan's own settings (K, step length, longest wait,
window, preemptible priority), and begins the first step of that plan: the
simulator's ``kilter`` maintenance policy does the same.
"""

from __future__ import annotations

import msgspec

from kilter.kube.api import ApiServer
from kilter.lifecycle.drain import Replan
from kilter.lifecycle.plan_doc import PlanDoc, StepDoc, plan_document
from kilter.lifecycle.works import fleet_work
from kilter.model.errors import InputError
from kilter.quota.policy import parse_time
from kilter.state.live import default_resources, list_cluster
from kilter.state.store import ClusterStore
from kilter.topology.catalog import Catalog
from kilter.topology.health import HealthSignals
from kilter.topology.maintenance import MaintenanceAsk, plan_maintenance

__all__ = ["live_replanner", "replan_step"]


def replan_step(store: ClusterStore, plan: PlanDoc, domains: list[str], now_s: float) -> StepDoc:
    """The first step of a plan made at ``now_s`` for ``domains`` of ``plan``, over the jobs in ``store``; each
    domain keeps the plan's nodes."""
    nodes = {d.domain: d.nodes for s in plan.steps for d in s.domains if d.domain in domains}
    missing = [d for d in domains if d not in nodes]
    if missing:
        raise InputError(f"the plan has no domain {', '.join(missing)}")
    chosen = [n for names in nodes.values() for n in names]
    work = fleet_work(store, now_s=now_s, nodes=chosen, preemptible_below=plan.preemptible_below)
    window_end = parse_time(plan.window_end, path="windowEnd") if plan.window_end else None
    ask = MaintenanceAsk(
        {d: work.domain_gpus.get(d, 0) for d in domains},
        now_s,
        plan.step_seconds,
        plan.max_unavailable_domains,
        plan.max_wait_seconds,
        window_end,
    )
    doc = plan_document(plan_maintenance(ask, work.works), ask, work, created_s=now_s)
    first = doc.steps[0]
    return msgspec.structs.replace(
        first, domains=[msgspec.structs.replace(d, nodes=list(nodes[d.domain])) for d in first.domains]
    )


def live_replanner(api: ApiServer, plan: PlanDoc, catalog: Catalog, signals: HealthSignals) -> Replan:
    """A ``Replan`` that lists the cluster behind ``api`` afresh each time it is asked."""

    def replan(domains: list[str], now_s: float) -> StepDoc:
        store = ClusterStore(catalog=catalog, health=signals)
        store.replace(list_cluster(api, default_resources(catalog)))
        return replan_step(store, plan, domains, now_s)

    return replan

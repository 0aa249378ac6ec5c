"""``kubectl kilter explain TARGET``: the whole story of one job.

TARGET is a name (a pod's, else a Job's, JobSet's, PyTorchJob's, Workload's,
PodGroup's or ``kilter.dev/gang`` gang's, first found), or ``pod/``, ``job/``,
``jobset/``, ``pytorchjob/``, ``workload/``, ``podgroup/`` or ``gang/`` and a
name, in the namespace of ``-n``. The
story: its gang and Workload, the quota decision (``gangs.pending``'s reason
while it waits, the admission once admitted), while it waits its expected
start as ``pending`` shows it and the reservation's story (the running jobs
whose ends it waits for, the gangs reserved on its nodes before it), per pod set the domains and
nodes of its plan or of its bound pods, per other domain why it does not
take the gang (``gangs.story``), the ``kilter.dev/plan`` record it carries
(with what a repair replaced by what, when the record is a repair's), and,
when kilter itself answers the view (``--kilter-service NS/NAME:PORT``,
``remote``), the decisions it recorded per pod (``/debug/explain``'s).
Nothing found of that name: exit 1.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kilter.cli import render
from kilter.cli.kubectl import decisions, output
from kilter.cli.kubectl.pending import start_of
from kilter.cli.kubectl.source import Cluster
from kilter.gangs.identity import INDEXED_ANNOTATIONS, INDEXED_LABELS, GangKey, in_gang, key_of
from kilter.gangs.pending import QUOTA_REASONS, Pending, why_pending
from kilter.gangs.story import domain_verdicts, recorded_plan
from kilter.kube.api import check_name
from kilter.model.core_v1 import Pod
from kilter.model.errors import InputError
from kilter.state.cluster import KUEUE

__all__ = ["TARGET_KINDS", "add_parser", "run"]

JOB_NAME = "batch.kubernetes.io/job-name"
VOLCANO = "scheduling.volcano.sh"
TARGET_KINDS = ("pod", "job", "jobset", "pytorchjob", "workload", "podgroup", "gang")
OWNER_KINDS = {"job": "Job", "jobset": "JobSet", "pytorchjob": "PyTorchJob"}
SHOWN_DOMAINS = 10


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "explain",
        parents=[common],
        help="the whole story of one job: gang, plan, domains, quota, recorded decisions",
        description="Why one job runs where it runs, or why it waits. TARGET: NAME (a pod's, else the first of "
        "the kinds below that has it), or pod/NAME, job/NAME, jobset/NAME, pytorchjob/NAME, workload/NAME, "
        "podgroup/NAME or gang/NAME (kilter.dev/gang, as top shows it).",
    )
    p.add_argument("target", metavar="TARGET", help="NAME | KIND/NAME (" + ", ".join(TARGET_KINDS) + ")")
    p.set_defaults(view=run)


@dataclass
class ExplainTarget:
    kind: str
    namespace: str
    name: str
    key: GangKey | None = None
    workload: Mapping[str, Any] | None = None
    owner: Mapping[str, Any] | None = None  # the object a plan record goes on (Workload or PodGroup)
    pods: list[Pod] = field(default_factory=list)


def _parse(text: str) -> tuple[str, str]:
    kind, sep, name = text.partition("/")
    if not sep:
        kind, name = "pod", text
    kind = {"pods": "pod", "jobs": "job", "jobsets": "jobset", "pytorchjobs": "pytorchjob"}.get(kind.lower(), kind)
    if kind.lower() not in TARGET_KINDS:
        raise InputError(f"cannot explain {kind!r}: give a pod name or one of {', '.join(TARGET_KINDS)} + /NAME")
    return kind.lower(), check_name(name, what=f"{kind} name")


def _owned_workload(cluster: Cluster, namespace: str, kind: str, name: str) -> Mapping[str, Any] | None:
    for obj in cluster.store.state().raw.of(KUEUE, "Workload"):
        meta = obj.get("metadata") or {}
        if meta.get("namespace") != namespace:
            continue
        for ref in meta.get("ownerReferences") or ():
            if isinstance(ref, Mapping) and ref.get("kind") == kind and ref.get("name") == name:
                return obj
    return None


def _owner_key(namespace: str, workload: Mapping[str, Any]) -> GangKey:
    """The gang key of a Workload's pods: by its owner's kind where pods carry that owner's labels."""
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or ():
        kind, name = ref.get("kind"), ref.get("name")
        if kind == "JobSet":
            return GangKey(namespace, "jobset", (name,))
        if kind in ("PyTorchJob", "MPIJob", "TFJob"):
            return GangKey(namespace, "kubeflow", (name,))
    return GangKey(namespace, "workload", ((workload.get("metadata") or {}).get("name", ""),))


def resolve(cluster: Cluster, text: str) -> ExplainTarget | None:
    """What TARGET names, with its gang's pods; None when nothing of that name exists. A bare NAME is looked up
    as each kind in turn (``TARGET_KINDS``' order: a pod first), so ``explain llama-405b-eval`` finds the Workload
    of that name where no pod has it."""
    kind, name = _parse(text)
    if "/" in text:
        return _resolve(cluster, kind, name)
    return next((t for k in TARGET_KINDS if (t := _resolve(cluster, k, name)) is not None), None)


def _resolve(cluster: Cluster, kind: str, name: str) -> ExplainTarget | None:
    ns = cluster.namespace or "default"
    store = cluster.store
    store.index_pods((*INDEXED_LABELS, JOB_NAME), INDEXED_ANNOTATIONS)
    t = ExplainTarget(kind, ns, name)
    if kind == "pod":
        pod = store.pod_named(ns, name)
        if pod is None:
            return None
        t.key = key_of(pod)
        t.pods = in_gang(t.key).members(store) if t.key else [pod]
        if t.key is not None and t.key.kind == "workload":
            t.workload = store.get(KUEUE, "Workload", ns, t.key.name)
        elif t.key is not None and t.key.kind in ("jobset", "kubeflow"):
            owner = "JobSet" if t.key.kind == "jobset" else "PyTorchJob"
            t.workload = _owned_workload(cluster, ns, owner, t.key.name)
    elif kind == "workload":
        t.workload = store.get(KUEUE, "Workload", ns, name)
        if t.workload is None:
            return None
        t.key = _owner_key(ns, t.workload)
    elif kind == "podgroup":
        t.owner = store.get(VOLCANO, "PodGroup", ns, name)
        t.key = GangKey(ns, "podgroup", (name,))
    elif kind == "gang":  # pods labelled kilter.dev/gang: NAME, as kubectl kilter top names them
        t.key = GangKey(ns, "gang", (name,))
    else:
        t.workload = _owned_workload(cluster, ns, OWNER_KINDS[kind], name)
        if kind == "job":
            t.pods = store.pods_with(ns, {JOB_NAME: name}, {})
            t.key = key_of(t.pods[0]) if t.pods else None
        else:
            t.key = GangKey(ns, "jobset" if kind == "jobset" else "kubeflow", (name,))
    if t.key is not None and not t.pods:
        t.pods = in_gang(t.key).members(store)
    if t.owner is None:
        t.owner = t.workload
    return t if (t.pods or t.workload is not None or t.owner is not None) else None


def _quota(cluster: Cluster, workload: Mapping[str, Any] | None) -> tuple[dict[str, Any] | None, Any]:
    """The quota decision for people and programs, and the pending entry (with its plan) when it waits."""
    if workload is None:
        return None, None
    meta = workload.get("metadata") or {}
    key = f"{meta.get('namespace')}/{meta.get('name')}"
    store = cluster.store
    for p in why_pending(store.state(), store.fleet(), now_s=cluster.now_s, window=cluster.runtime_window):
        if p.key == key and p.reason in QUOTA_REASONS:
            return {"state": "pending", "position": p.position, "reason": p.reason, "message": p.message}, p
        if p.key == key:
            fits = f"fits ClusterQueue {p.cluster_queue} when its turn comes (position {p.position})"
            return {"state": "pending", "position": p.position, "reason": "", "message": fits}, p
    admission = (workload.get("status") or {}).get("admission") or {}
    flavors = sorted(
        {f"{r}={f}" for psa in admission.get("podSetAssignments") or () for r, f in (psa.get("flavors") or {}).items()}
    )
    cq = admission.get("clusterQueue")
    if cq:
        return {
            "state": "admitted",
            "clusterQueue": cq,
            "flavors": flavors,
            "reason": "QuotaReserved",
            "message": f"quota reserved in ClusterQueue {cq} ({', '.join(flavors)})",
        }, None
    return {"state": "finished or inactive", "reason": "", "message": "neither pending nor holding quota"}, None


def story(cluster: Cluster, t: ExplainTarget) -> dict[str, Any]:
    store = cluster.store
    fleet = store.fleet()
    quota, entry = _quota(cluster, t.workload)
    bound = [p for p in t.pods if p.spec.node_name and p.spec.node_name in fleet.node_index]
    by_domain: dict[str, list[str]] = {}
    for p in bound:
        by_domain.setdefault(fleet.domain_of_node(fleet.node_index[p.spec.node_name]), []).append(p.spec.node_name)
    plan = entry.plan if entry is not None else None
    chosen = list(by_domain) or (list(plan.domains) if plan is not None else [])
    request = entry.request if entry is not None else None
    shapes = tuple((ps.count, ps.gpus_per_pod) for ps in request.pod_sets) if request is not None else ()
    resource = request.resource if request is not None else ""
    verdicts = domain_verdicts(fleet, resource, shapes, chosen) if shapes and resource else []
    record = recorded_plan(t.owner, t.pods)
    data: dict[str, Any] = {
        "target": f"{t.kind}/{t.namespace}/{t.name}",
        "gang": t.key.format() if t.key else None,
        "workload": (t.workload.get("metadata") or {}).get("name") if t.workload else None,
        "pods": {"total": len(t.pods), "bound": len(bound), "pending": len(t.pods) - len(bound)},
        "quota": quota,
        "topology": None
        if entry is None or entry.plan is None
        else {
            "reason": entry.reason,
            "message": entry.message,
            "domainsMin": entry.domains_min or None,
        },
        "placement": [{"domain": d, "pods": len(n), "nodes": sorted(n)} for d, n in sorted(by_domain.items())],
        "plan": None
        if plan is None
        else {
            "feasible": plan.feasible,
            "reason": plan.reason,
            "domains": list(plan.domains),
            "podSets": [
                {"name": ps.name, "pods": ps.count, "gpusPerPod": ps.gpus_per_pod, "nodes": list(ps.nodes)}
                for ps in plan.pod_sets
            ],
        },
        "otherDomains": [
            {
                "domain": v.domain,
                "podsFit": v.pods_fit,
                "freeGpus": v.free_gpus,
                "totalGpus": v.total_gpus,
                "reason": v.reason,
            }
            for v in verdicts
        ],
        "planRecord": None
        if record is None
        else {
            "gang": record.gang,
            "at": record.at,
            "slots": len(record.slots),
            "nodes": sorted({n for n, _ in record.slots}),
            "repaired": [
                {"slot": slot, "was": was, "now": record.slots[slot][0], "how": how}
                for slot, was, how in record.repaired
            ],
            "verified": False,
        },
    }
    data["start"] = _start(cluster, entry)
    if cluster.recorded is not None:
        data["decisions"] = decisions.decisions(cluster.recorded, t.pods)
    return data


def _start(cluster: Cluster, entry: Pending | None) -> dict[str, Any] | None:
    """A pending Workload's expected start as ``kubectl kilter pending`` shows it, with the reservation's story:
    the running jobs whose ends it waits for, and the gangs reserved on its nodes before it."""
    if entry is None:
        return None
    starts = cluster.expected_starts()
    start, why = start_of(entry, starts)
    if start is None or start.reservation is None:
        return {"expectedStart": None, "reservedDomains": [], "reason": why, "waitsFor": [], "after": []}
    running, ahead = starts.waits_for(start)
    return {
        "expectedStart": render.rfc3339(start.reservation.start_s),
        "reservedDomains": list(start.domains),
        "reason": start.reason,
        "waitsFor": [
            {
                "gang": h.key,
                "gpus": sum(h.gpus),
                "expectedEnd": _instant(h.expected_end_s),
            }
            for h in running
        ],
        "after": [
            {"owner": a.gang.owner, "start": render.rfc3339(r.start_s), "expectedEnd": _instant(r.expected_end_s)}
            for a in ahead
            if (r := a.reservation) is not None
        ],
    }


def _instant(unix_s: float) -> str | None:
    return render.rfc3339(unix_s) if math.isfinite(unix_s) else None


def _text(data: dict[str, Any], name: Callable[[str], str]) -> str:
    out = [f"Target:    {data['target']}", f"Gang:      {data['gang'] or '-'}"]
    if data["workload"]:
        out.append(f"Workload:  {data['workload']}")
    pods = data["pods"]
    out.append(f"Pods:      {pods['total']} ({pods['bound']} bound, {pods['pending']} pending)")
    if data["quota"]:
        q = data["quota"]
        out.append(f"Quota:     {q['reason'] + ': ' if q['reason'] else ''}{q['message']}")
    if data["topology"]:
        out.append(f"Topology:  {data['topology']['reason']}: {data['topology']['message']}")
    start = data["start"]
    if start is not None:
        when = start["expectedStart"]
        out.append(f"Start:     {when}: {start['reason']}" if when else f"Start:     none: {start['reason']}")
        for h in start["waitsFor"]:
            out.append(f"           when {h['gang']} ends ({h['gpus']} GPUs, expected {h['expectedEnd'] or 'never'})")
        for a in start["after"]:
            out.append(f"           after {a['owner']}, reserved there from {a['start']} to {a['expectedEnd'] or '?'}")
    text = "\n".join(out) + "\n"
    if data["placement"]:
        rows: list[tuple[object, ...]] = [
            (name(p["domain"]), p["pods"], render.compress_names(p["nodes"])) for p in data["placement"]
        ]
        text += "\nPlacement (bound pods):\n" + render.table(("DOMAIN", "PODS", "NODES"), rows)
    plan = data["plan"]
    if plan is not None and plan["podSets"]:
        rows = [
            (ps["name"], ps["pods"], ps["gpusPerPod"], render.compress_names(ps["nodes"])) for ps in plan["podSets"]
        ]
        text += "\nPlan:\n" + render.table(("POD SET", "PODS", "GPUS/POD", "NODES"), rows)
    others = data["otherDomains"]
    if others:
        rows = [(name(v["domain"]), v["podsFit"], f"{v['freeGpus']}/{v['totalGpus']}", v["reason"]) for v in others]
        shown = rows[:SHOWN_DOMAINS]
        more = f" ({len(rows) - len(shown)} more in -o json)" if len(rows) > len(shown) else ""
        text += f"\nOther domains{more}:\n" + render.table(("DOMAIN", "FITS", "FREE", "WHY NOT"), shown)
    if data["planRecord"]:
        r = data["planRecord"]
        text += (
            f"\nPlan record: {r['gang']} at {r['at']}, {r['slots']} slots on "
            f"{render.compress_names(r['nodes'])} (signature not verified)\n"
        )
        for m in r["repaired"]:
            was = f"replaced {m['was']} by" if m["was"] else "placed on"
            text += f"  repair: slot {m['slot']} {was} {m['now']} ({m['how']})\n"
    if "decisions" in data:
        text += "\n" + decisions.render_decisions(data["decisions"])
    return text


def run(args: argparse.Namespace, cluster: Cluster) -> output.Answer:
    target = resolve(cluster, args.target)
    if target is None:
        where = cluster.namespace or "default"
        kinds = "" if "/" in args.target else f" as any of {', '.join(TARGET_KINDS)}"
        return output.Answer(1, "", f"kubectl kilter explain: {args.target} not found{kinds} in namespace {where}")
    data = story(cluster, target)
    return output.Answer(0, output.emit(args, data, _text(data, cluster.store.fleet().domain_name)))

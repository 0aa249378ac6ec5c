"""The parts of one gang's story that ``kubectl kilter explain`` (and the placement API) tell: where its pods are,
why each other domain would not take it, and the plan record it carries.

``domain_verdicts`` is one pass of array arithmetic over the fleet: per
scale-up domain of the gang's platform, how many of its pods (per pod shape)
the domain's free GPUs on usable nodes hold (its spare nodes left out, as
new plans leave them: ``topology.spares``), against how many the gang needs.
A domain that cannot take the whole gang says what it lacks; the planner may
still use it as one part of a split plan, which the verdict also says.

``recorded_plan`` reads ``kilter.dev/plan`` without verifying its signature
(the plugin holds no plan key): it shows what is written, marked unverified.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from kilter.gangs import records
from kilter.model.core_v1 import Pod
from kilter.topology import spares
from kilter.topology.fleet import Fleet

__all__ = ["DomainVerdict", "domain_verdicts", "recorded_plan"]


@dataclass(frozen=True)
class DomainVerdict:
    """One scale-up domain judged for a gang: what it could hold now and why it does not take the gang whole."""

    domain: str
    pods_fit: int  # pods of the gang's shapes its free GPUs hold now (each shape alone, the tightest counted)
    free_gpus: int  # free on usable nodes
    total_gpus: int
    unusable_nodes: int
    reason: str


def domain_verdicts(
    fleet: Fleet, resource: str, shapes: tuple[tuple[int, int], ...], chosen: Iterable[str] = ()
) -> list[DomainVerdict]:
    """Each domain of the platforms of ``resource`` other than ``chosen``, with why it cannot hold the gang of
    ``shapes`` ((pods, GPUs per pod) per pod set) whole, the roomiest first, then by name."""
    bm = fleet.bitmap
    n_domains = len(fleet.domain_ids)
    platforms = [i for i, p in enumerate(fleet.platforms) if p.device_resource == resource]
    usable = bm.node_usable_flags != 0
    free = np.where(usable, bm.node_gpu_counts - bm.node_used_gpus, 0).astype(np.int64)
    free_d = np.bincount(fleet.node_domain, weights=free, minlength=n_domains).astype(np.int64)
    total_d = np.bincount(fleet.node_domain, weights=bm.node_gpu_counts, minlength=n_domains).astype(np.int64)
    bad_d = np.bincount(fleet.node_domain, weights=~usable, minlength=n_domains).astype(np.int64)
    held = spares.held_mask(fleet)
    plannable = free if held is None else np.where(held, 0, free)  # new plans leave spares alone
    held_d = (
        np.zeros(n_domains, dtype=np.int64)
        if held is None
        else np.bincount(fleet.node_domain[held], minlength=n_domains)
    )
    need = sum(c for c, _ in shapes)
    fit = np.zeros(n_domains, dtype=np.int64)
    for i, (_, per_pod) in enumerate(shapes):
        per = np.bincount(fleet.node_domain, weights=plannable // max(per_pod, 1), minlength=n_domains).astype(np.int64)
        fit = per if i == 0 else np.minimum(fit, per)  # each shape alone: an upper bound shared by all
    fit = np.minimum(fit, need)
    skip = set(chosen)
    out = []
    for d in range(n_domains):
        name = fleet.domain_ids[d]
        if int(bm.domain_platforms[d]) not in platforms or name in skip:
            continue
        pods = int(fit[d])
        shape = " + ".join(f"{c} x {g} GPUs" for c, g in shapes)
        if pods >= need:
            why = f"could hold all {need} pods ({shape}) now; the planner preferred another"
        elif pods == 0:
            why = f"holds none of the {need} pods ({shape}): {int(free_d[d])} of {int(total_d[d])} GPUs free"
        else:
            why = f"holds {pods} of the {need} pods ({shape}): {int(free_d[d])} of {int(total_d[d])} GPUs free"
        if bad_d[d]:
            why += f"; {int(bad_d[d])} node{'s' if bad_d[d] != 1 else ''} unusable"
        if held_d[d]:
            why += f"; {int(held_d[d])} spare node{'s' if held_d[d] != 1 else ''} kept for repairs"
        out.append(DomainVerdict(name, pods, int(free_d[d]), int(total_d[d]), int(bad_d[d]), why))
    out.sort(key=lambda v: (-v.pods_fit, -v.free_gpus, v.domain))
    return out


def recorded_plan(owner: Mapping[str, Any] | None, pods: Iterable[Pod]) -> records.PlanRecord | None:
    """The newest ``kilter.dev/plan`` record on the gang's owner object or its pods, decoded but not verified."""
    found: list[records.PlanRecord] = []
    meta = owner.get("metadata") if owner is not None else None
    notes = meta.get("annotations") if isinstance(meta, Mapping) else None
    raw = notes.get(records.PLAN_ANNOTATION) if isinstance(notes, Mapping) else None
    if isinstance(raw, str):
        record = records.decode(raw, where="owner")
        found += [record] if record is not None else []
    for pod in pods:
        raw = pod.metadata.annotations.get(records.PLAN_ANNOTATION)
        if raw is not None:
            record = records.decode(raw, where=f"pod {pod.metadata.namespace}/{pod.metadata.name}")
            found += [record] if record is not None else []
    return max(found, key=lambda r: r.at_s, default=None)

"""How many spare nodes each scale-up domain keeps: the ``kilter.dev/spare-nodes-per-domain`` settings resolved.

Four places set a count N (``SPARE_NODES_PER_DOMAIN``, a whole number):

* a **ResourceFlavor**: the domains with a node its ``nodeLabels`` select
  (every node when it has none, as Kueue reads an empty ``nodeLabels``);
* a **ClusterQueue**: the domains of the flavors it lists quota for in a
  resource group covering a GPU resource, each on the platforms whose device
  resource that group covers (a flavor listed with a nominal quota of 0 still
  counts: the queue may borrow there). A flavor without a ResourceFlavor
  object reaches nothing (Kueue holds such a queue inactive);
* a **Cohort**: the domains of every ClusterQueue below it, through nested
  Cohorts, and of the flavors of its own resource groups;
* the fleet default (``--spare-nodes-per-domain``): every domain.

Only domains that may keep spares count (``spares.eligible_domains``: those
of multi-node platforms). Where several settings reach one domain, the
**largest wins**: a spare is a promise to whoever set it (the queue whose
gangs repair there), and keeping one node more than another setting asked
for breaks no one's promise, while keeping fewer breaks one.

The same objects (and ``--spares-for-preemptible``, the fleet default) say
whether a domain lends its spares to preemptible pods
(``SPARES_FOR_PREEMPTIBLE``, ``"true"`` or ``"false"``; ``spares``' module
docstring says to whom). A domain lends when a ``"true"`` reaches it and no
``"false"`` does: a ``"false"`` is a queue keeping its promise of idle
spares, which lending would weaken, so it wins as the larger count does.

A count above the most nodes a domain of the platforms it reaches can hold
(``limit``) is refused, as is anything but a whole number: the validating
webhook at submission, and here, where a bad one is skipped (the others
still decide) and named in ``problems`` (``/readyz`` lists them), so that one
typo never stops placing. A count above a smaller domain's node count holds
all that domain's wholly free nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kilter.model.annotations import (
    SPARE_NODES_PER_DOMAIN,
    SPARES_FOR_PREEMPTIBLE,
    parse_spare_nodes,
    parse_spares_for_preemptible,
)
from kilter.model.errors import InputError
from kilter.model.kueue import ClusterQueue, Cohort, ResourceFlavor, ResourceGroup
from kilter.topology import spares
from kilter.topology.catalog import Catalog
from kilter.topology.fleet import Fleet

__all__ = [
    "SpareSettings",
    "apply",
    "catalog_limit",
    "check",
    "cohort_reach",
    "flavor_reach",
    "limit",
    "queue_reach",
    "resolve",
]

DomainMask = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class SpareSettings:
    """Per domain (fleet domain order) the spare count that wins, whether it lends its spares to preemptible pods,
    and the settings skipped, one line each."""

    per_domain: npt.NDArray[np.int32]
    problems: tuple[str, ...] = ()
    lent: npt.NDArray[np.bool_] | None = None


def flavor_reach(fleet: Fleet, node_labels: Mapping[str, str]) -> DomainMask:
    """The eligible domains with a node carrying every one of ``node_labels``."""
    match = np.ones(fleet.n_nodes, dtype=bool)
    for key, value in sorted(node_labels.items()):
        codes, values = fleet.label_codes(key)
        match &= codes == values.get(value, -2)
    hit = np.bincount(fleet.node_domain[match], minlength=len(fleet.domain_ids)) > 0
    return hit & spares.eligible_domains(fleet)


def _groups_reach(fleet: Fleet, groups: Iterable[ResourceGroup], flavors: Mapping[str, DomainMask]) -> DomainMask:
    """The domains the flavors of these resource groups reach, each on the platforms of the resources covered."""
    resource_of = np.array([p.device_resource for p in fleet.platforms], dtype=object)
    resource = resource_of[fleet.bitmap.domain_platforms] if len(resource_of) else np.array([], dtype=object)
    out = np.zeros(len(fleet.domain_ids), dtype=bool)
    for group in groups:
        covered = np.isin(resource, list(group.covered_resources))
        for fq in group.flavors:
            reach = flavors.get(fq.name)
            if reach is not None:
                out |= reach & covered
    return out


def queue_reach(fleet: Fleet, cq: ClusterQueue, flavors: Mapping[str, DomainMask]) -> DomainMask:
    """The domains of a ClusterQueue's GPU flavors (``flavors``: each ResourceFlavor's ``flavor_reach``)."""
    return _groups_reach(fleet, cq.spec.resource_groups, flavors)


def cohort_reach(
    fleet: Fleet,
    name: str,
    *,
    cluster_queues: Sequence[ClusterQueue],
    cohorts: Sequence[Cohort],
    flavors: Mapping[str, DomainMask],
) -> DomainMask:
    """The domains of every ClusterQueue under Cohort ``name`` (nested Cohorts too) and of the Cohorts' own
    resource groups; a cycle in the tree is walked once."""
    children: dict[str, list[str]] = {}
    for c in cohorts:
        if c.spec.parent_cohort:
            children.setdefault(c.spec.parent_cohort, []).append(c.metadata.name)
    own = {c.metadata.name: c for c in cohorts}
    under, stack = {name}, [name]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in under:
                under.add(child)
                stack.append(child)
    out = np.zeros(len(fleet.domain_ids), dtype=bool)
    for cq in cluster_queues:
        if cq.spec.parent in under:
            out |= queue_reach(fleet, cq, flavors)
    for cohort in sorted(under & own.keys()):
        out |= _groups_reach(fleet, own[cohort].spec.resource_groups, flavors)
    return out


def limit(fleet: Fleet, reach: DomainMask, catalog: Catalog | None = None) -> int:
    """The largest count a setting reaching ``reach`` may ask: the most nodes a domain of its platforms holds
    (the catalog's, or more where a domain has more nodes); where it reaches no domain, the largest of any
    multi-node platform of the catalog (nothing narrower can be proved)."""
    if reach.any():
        plats = np.unique(fleet.bitmap.domain_platforms[reach]).tolist()
        sizes = np.diff(fleet.bitmap.domain_node_start)[reach]
        return int(max(max(fleet.platforms[p].nodes_per_domain for p in plats), int(sizes.max())))
    return catalog_limit(catalog or fleet.catalog)


def catalog_limit(catalog: Catalog) -> int:
    """The most nodes a domain of any multi-node platform of ``catalog`` holds (1 when it has none): the bound of a
    setting nothing narrower can be proved for."""
    return max((p.nodes_per_domain for p in catalog.platforms if p.is_multi_node), default=1)


def resolve(
    fleet: Fleet,
    *,
    flavors: Sequence[ResourceFlavor] = (),
    cluster_queues: Sequence[ClusterQueue] = (),
    cohorts: Sequence[Cohort] = (),
    default: int = 0,
    lend_default: bool = False,
) -> SpareSettings:
    """The spare count of every domain: the largest of the settings that reach it; and whether it lends its
    spares (module docstring)."""
    n = len(fleet.domain_ids)
    eligible = spares.eligible_domains(fleet)
    wanted = np.where(eligible, max(default, 0), 0).astype(np.int32)
    lend = eligible.copy() if lend_default else np.zeros(n, dtype=bool)
    keep = np.zeros(n, dtype=bool)
    problems: list[str] = []
    settings: list[tuple[str, str, Mapping[str, str]]] = [
        *(("ResourceFlavor", rf.metadata.name, rf.metadata.annotations) for rf in flavors),
        *(("ClusterQueue", cq.metadata.name, cq.metadata.annotations) for cq in cluster_queues),
        *(("Cohort", c.metadata.name, c.metadata.annotations) for c in cohorts),
    ]
    given = sorted(
        (kind, name, key, raw)
        for kind, name, notes in settings
        for key in (SPARE_NODES_PER_DOMAIN, SPARES_FOR_PREEMPTIBLE)
        if (raw := notes.get(key)) is not None
    )
    if not given:  # the common cluster: no setting, so no flavor's reach need be read (ClusterQueues churn)
        return SpareSettings(wanted, (), lend)
    reach = {rf.metadata.name: flavor_reach(fleet, rf.spec.node_labels) for rf in flavors}
    queues = {cq.metadata.name: cq for cq in cluster_queues}
    for kind, name, key, raw in given:
        if kind == "ResourceFlavor":
            where = reach[name]
        elif kind == "ClusterQueue":
            where = queue_reach(fleet, queues[name], reach)
        else:
            where = cohort_reach(fleet, name, cluster_queues=cluster_queues, cohorts=cohorts, flavors=reach)
        try:
            if key == SPARES_FOR_PREEMPTIBLE:
                lends = parse_spares_for_preemptible(raw, what=f"{kind} {name}: {key}")
                if lends:
                    lend |= where
                else:
                    keep |= where
                continue
            count = parse_spare_nodes(raw, limit=limit(fleet, where), what=f"{kind} {name}: {key}")
        except InputError as exc:
            problems.append(f"{exc}; skipped")
            continue
        wanted = np.maximum(wanted, np.where(where, count, 0)).astype(np.int32)
    assert wanted.shape == (n,)
    return SpareSettings(wanted, tuple(problems), lend & ~keep)


def apply(
    fleet: Fleet,
    *,
    flavors: Sequence[ResourceFlavor] = (),
    cluster_queues: Sequence[ClusterQueue] = (),
    cohorts: Sequence[Cohort] = (),
    default: int = 0,
    lend_default: bool = False,
) -> tuple[str, ...]:
    """Resolve the settings and set them on ``fleet`` (``spares.assign``); the problems found."""
    settings = resolve(
        fleet,
        flavors=flavors,
        cluster_queues=cluster_queues,
        cohorts=cohorts,
        default=default,
        lend_default=lend_default,
    )
    spares.assign(fleet, settings.per_domain, settings.lent)
    return settings.problems


def check(
    fleet: Fleet,
    obj: ResourceFlavor | ClusterQueue | Cohort,
    *,
    flavors: Sequence[ResourceFlavor] = (),
    cluster_queues: Sequence[ClusterQueue] = (),
    cohorts: Sequence[Cohort] = (),
) -> None:
    """``InputError`` if ``obj``'s spare count is no whole number within ``limit`` of what it would reach among
    these objects, or its ``SPARES_FOR_PREEMPTIBLE`` is neither ``"true"`` nor ``"false"`` (the validating
    webhook, before ``obj`` is stored: ``obj`` replaces its namesake)."""
    lends = obj.metadata.annotations.get(SPARES_FOR_PREEMPTIBLE)
    if lends is not None:
        parse_spares_for_preemptible(lends, what=f"{obj.kind} {obj.metadata.name}: {SPARES_FOR_PREEMPTIBLE}")
    raw = obj.metadata.annotations.get(SPARE_NODES_PER_DOMAIN)
    if raw is None:
        return
    name = obj.metadata.name
    if isinstance(obj, ResourceFlavor):
        where = flavor_reach(fleet, obj.spec.node_labels)
    else:
        reach = {rf.metadata.name: flavor_reach(fleet, rf.spec.node_labels) for rf in flavors}
        if isinstance(obj, ClusterQueue):
            where = queue_reach(fleet, obj, reach)
        else:
            others = [c for c in cohorts if c.metadata.name != name]
            where = cohort_reach(fleet, name, cluster_queues=cluster_queues, cohorts=[*others, obj], flavors=reach)
    parse_spare_nodes(raw, limit=limit(fleet, where), what=f"{obj.kind} {name}: {SPARE_NODES_PER_DOMAIN}")

"""Every ``kilter.dev/*`` annotation and label key, named once, each with its one format.

The keys are promises to users (docs/gangs.md and the pages it links document each with its values),
so every module reads and writes them through these names rather than its
own literal: a renamed or retyped key then changes in one place, and
``grep`` finds every reader. Keys other projects own (Kueue's, Volcano's,
LeaderWorkerSet's) stay next to the code that reads them.
"""

from __future__ import annotations

import re

from kilter.model.errors import InputError

__all__ = [
    "AVOID_REGIONS",
    "BLOCK",
    "CLUSTER_QUEUE",
    "COMPUTE_DOMAIN_SHARES_CLIQUES",
    "COMPUTE_DOMAIN_SPANS_CLIQUES",
    "CONTROLLER_NAME",
    "DATA_REGION",
    "DECAYED_USAGE",
    "GANG",
    "GANG_SIZE",
    "HYPERNODE_TIER_PREFIX",
    "LIFECYCLE",
    "LIFECYCLE_STATES",
    "MAX_GANG_SIZE",
    "MIN_RUNTIME",
    "PLAN",
    "PLAN_KEY_ROTATED_AT",
    "PLATFORM",
    "PREFIX",
    "PRODUCT",
    "REGIONS",
    "SCALE_UP_DOMAIN",
    "SPARES_FOR_PREEMPTIBLE",
    "SPARE_NODES_PER_DOMAIN",
    "SPINE",
    "TOPOLOGY",
    "TOPOLOGY_ACK",
    "TOPOLOGY_POLICY",
    "UNPROTECTED_TOPOLOGY_ACK",
    "USAGE_HALF_LIFE",
    "ZONE",
    "hypernode_tier",
    "is_true",
    "parse_gang_size",
    "parse_regions",
    "parse_spare_nodes",
    "parse_spares_for_preemptible",
]

PREFIX = "kilter.dev/"
"""What every key below starts with (the validating webhook rejects unknown ``kilter.dev/*`` queue annotations)."""

# ------------------------------------------------------------------ gangs and plans (pods, jobs, owners)

GANG = "kilter.dev/gang"
"""Pod label: the gang's name within the pod's namespace (any label value); needs ``GANG_SIZE``."""

GANG_SIZE = "kilter.dev/gang-size"
"""Pod label (or annotation): the gang's pod count, a whole number from 1 to 100,000 (``parse_gang_size``)."""

MAX_GANG_SIZE = 100_000
"""The most pods a gang may declare: a gang of 100,000 pods of one GPU or more already fills the largest fleet
kilter models (100,000 GPUs, docs/benchmarks.md), so a larger count is a typo, not a job."""

_WHOLE_NUMBER = re.compile(r"[0-9]{1,16}")  # ASCII digits only: no sign, space, exponent or other script's digits


def parse_gang_size(raw: str, *, what: str = f"label {GANG_SIZE}") -> int:
    """The gang's pod count ``raw`` spells; ``InputError`` unless it is a whole number from 1 to ``MAX_GANG_SIZE``.

    The one rule the validating webhook (at submission) and the extender
    (``kilter.gangs.identity``, at scheduling) both apply, so a count one
    accepts the other never refuses. ``what`` names where the value came
    from in the message. Python's ``int`` would also take ``" 4"``, ``"+4"``,
    ``"1_0"`` or non-ASCII digits; none of those is a count a user meant.
    """
    if not _WHOLE_NUMBER.fullmatch(raw) or not 1 <= int(raw) <= MAX_GANG_SIZE:
        raise InputError(f"{what} must be a whole number from 1 to {MAX_GANG_SIZE:,}, got {raw[:40]!r}")
    return int(raw)


PLAN = "kilter.dev/plan"
"""A gang's recorded plan, written by kilter only (``kilter.gangs.records``), on the PodGroup, the Workload or the
gang's pods. Compact JSON: ``{"v":1,"gang":"NS/KIND/NAME","at":"RFC 3339 UTC","slots":[["node",GPUs],...]}``."""

PLAN_KEY_ROTATED_AT = "kilter.dev/plan-key-rotated-at"
"""Annotation of the Secret of ``--plan-key-secret``, written by kilter only (``kilter.gangs.key_secret``): when
its first key was put first, RFC 3339 in UTC (``2026-12-04T11:00:00Z``); the writing replica rotates the key once
this is ``--plan-key-rotation`` old."""

TOPOLOGY = "kilter.dev/topology"
"""Job (or pod template) annotation: ``auto`` opts the job in to topology-aware placement, ``off`` opts it out."""

CONTROLLER_NAME = TOPOLOGY
"""The ``controllerName`` of kilter's Kueue AdmissionCheck, and its server-side-apply field manager: the same string
as the job annotation ``TOPOLOGY``, since the check is what that annotation asks for."""

# ------------------------------------------------------------------ NVIDIA ComputeDomains (resource.nvidia.com)

COMPUTE_DOMAIN_SPANS_CLIQUES = "kilter.dev/compute-domain-spans-cliques"
"""ComputeDomain annotation: ``"true"`` lets the domain's pods spread over several NVLink cliques (scale-up
domains); any other value, or none, keeps them in one (IMEX shares GPU memory inside one clique only)."""

COMPUTE_DOMAIN_SHARES_CLIQUES = "kilter.dev/compute-domain-shares-cliques"
"""ComputeDomain annotation: ``"true"`` lets the domain share a clique with other ComputeDomains that carry it too;
without it on both, kilter keeps two ComputeDomains out of one clique (their IMEX daemons conflict)."""


def is_true(value: str | None) -> bool:
    """An opt-in annotation's value reads as set: ``"true"``, in any case, nothing else (not ``"1"``, ``"yes"``)."""
    return value is not None and value.strip().lower() == "true"


# ------------------------------------------------------------------ regions (Kueue Workloads of the global pool)

REGIONS = "kilter.dev/regions"
"""Workload or pod template annotation: the regions the job may run in, best first (``eu-west,us-east``)."""

AVOID_REGIONS = "kilter.dev/avoid-regions"
"""Workload or pod template annotation: regions the job must not run in."""

DATA_REGION = "kilter.dev/data-region"
"""Workload or pod template annotation: the region holding the job's data; ranked first among equal placements."""

_REGION_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def parse_regions(raw: str, *, what: str) -> tuple[str, ...]:
    """A comma-separated list of region names (lower-case DNS names, as MultiKueue's clusters are named); a bad
    name is an ``InputError``, so a typo does not silently send a job anywhere."""
    names = tuple(n.strip() for n in raw.split(",") if n.strip())
    for name in names:
        if not _REGION_NAME.fullmatch(name):
            raise InputError(f"{what}: {name[:60]!r} is not a region name (lower-case letters, digits, '-', '.')")
    return names


# ------------------------------------------------------------------ queues (ClusterQueues, Cohorts, Volcano Queues)

TOPOLOGY_POLICY = "kilter.dev/topology-policy"
"""ClusterQueue annotation: ``auto`` (every job of the queue is placed by topology) or ``off``."""

CLUSTER_QUEUE = "kilter.dev/cluster-queue"
"""Volcano Queue annotation: the name of the Kueue ClusterQueue whose quota the queue is bound to."""

USAGE_HALF_LIFE = "kilter.dev/usage-half-life"
"""ClusterQueue or Cohort annotation: a duration (``7d``, ``36h``, ``90m``, ``1h30m``) over which decayed usage
halves; longer than 0s."""

MIN_RUNTIME = "kilter.dev/min-runtime"
"""ClusterQueue or Cohort annotation: a duration; a workload admitted less than this long ago is not preempted for
another ClusterQueue."""

DECAYED_USAGE = "kilter.dev/decayed-usage"
"""ClusterQueue or Cohort annotation, written by kilter only: the decay state as JSON,
``{"time": RFC 3339, "usage": {"flavor/resource": n >= 0}}``."""

SPARE_NODES_PER_DOMAIN = "kilter.dev/spare-nodes-per-domain"
"""ResourceFlavor, ClusterQueue or Cohort annotation: a whole number N >= 0 of healthy, wholly free nodes kept out of
new gang plans in each scale-up domain the object reaches (``kilter.topology.spare_settings``); repairs of running
gangs may use them. At most the platform's nodes per domain (``parse_spare_nodes``)."""


def parse_spare_nodes(raw: str, *, limit: int, what: str = f"annotation {SPARE_NODES_PER_DOMAIN}") -> int:
    """The spare count ``raw`` spells; ``InputError`` unless a whole number from 0 to ``limit``.

    ``limit`` is the most nodes a domain of the platforms the setting reaches
    can hold: a larger count could never be kept anywhere, so it is a typo
    (``180`` for ``18``), not a wish. The validating webhook and the state
    apply this one rule, so a value one accepts the other never skips.
    """
    if not _WHOLE_NUMBER.fullmatch(raw) or not 0 <= int(raw) <= limit:
        raise InputError(f"{what} must be a whole number from 0 to {limit}, got {raw[:40]!r}")
    return int(raw)


SPARES_FOR_PREEMPTIBLE = "kilter.dev/spares-for-preemptible"
"""ResourceFlavor, ClusterQueue or Cohort annotation: ``"true"`` or ``"false"``. ``"true"`` lends the spare nodes of
the scale-up domains the object reaches to pods of lower priority than every gang running there, which a repair in
that domain preempts when it needs the node back; ``"false"`` keeps them idle, and wins where both reach a domain
(``kilter.topology.spare_settings``)."""


def parse_spares_for_preemptible(raw: str, *, what: str = f"annotation {SPARES_FOR_PREEMPTIBLE}") -> bool:
    """``"true"`` or ``"false"`` as written (the validating webhook and the state apply this one rule); anything
    else is an ``InputError``: a typo must not lend a domain's spares, nor silently keep them."""
    if raw not in ("true", "false"):
        raise InputError(f'{what} must be "true" or "false", got {raw[:40]!r}')
    return raw == "true"


# ------------------------------------------------------------------ node labels

PLATFORM = "kilter.dev/platform"
"""Node label: a catalog platform name or alias (``GB200-NVL36x2``, ``VR-NVL144`` ...); overrides product detection."""

PRODUCT = "kilter.dev/product"
"""Node label the fleet generator writes the GPU product under for a platform that has no product label of its own."""

LIFECYCLE = "kilter.dev/lifecycle"
"""Node label: the node's lifecycle state (``LIFECYCLE_STATES``); only ``ready`` (or no label) takes new plans.
Pods already running on a node in any other state keep running."""

LIFECYCLE_STATES = ("qualifying", "ready", "degraded", "maintenance", "repairing", "retired")

TOPOLOGY_ACK = "kilter.dev.node-restriction.kubernetes.io/topology-ack"
"""Node label whose value is the ID of the node's scale-up domain: a person acknowledges that domain's validation
errors (``kilter fleet validate``; a node short of GPUs, mixed products), which until then make it take single-pod
gangs only. Under ``node-restriction.kubernetes.io``, which the NodeRestriction admission plugin forbids a kubelet
to add, change or remove on its own Node: the node a finding is about cannot acknowledge it. The value names the
domain, so a node that relabels itself into another domain carries no acknowledgement there."""

UNPROTECTED_TOPOLOGY_ACK = "kilter.dev/topology-ack"
"""The node label that acknowledged a domain before ``TOPOLOGY_ACK``: a kubelet may set it on its own Node, so it
acknowledges nothing; a domain in error whose nodes carry it says so (``validate``, ``ack-ignored``)."""

SCALE_UP_DOMAIN = "kilter.dev/scale-up-domain"
"""Node label: any string naming the node's NVLink/UALink domain; wins over the other domain labels."""

BLOCK = "kilter.dev/block"
"""Node label: the name of the group of domains above the node's domain (finest level of kilter's own scheme)."""

SPINE = "kilter.dev/spine"
"""Node label: the name of the group of blocks above ``BLOCK``."""

ZONE = "kilter.dev/zone"
"""Node label: the name of the group of spines above ``SPINE`` (coarsest level of kilter's own scheme)."""

HYPERNODE_TIER_PREFIX = "kilter.dev/hypernode-tier-"
"""Node label prefix kilter derives from Volcano HyperNodes: ``kilter.dev/hypernode-tier-<t>: <HyperNode name>``."""


def hypernode_tier(tier: int) -> str:
    """The node label naming the node's HyperNode of ``tier``."""
    return f"{HYPERNODE_TIER_PREFIX}{tier}"

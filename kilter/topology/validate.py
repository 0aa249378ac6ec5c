"""Topology validation: each scale-up domain as the cluster shows it, against the shape its platform promises.

A delivered rack is cabled, labelled and reported by several tools (GPU
Feature Discovery's clique label, the device plugin's GPU count), and any of
them can be wrong in a way the scheduler cannot see: a tray that never
joined, a GPU that fell off the bus, two racks' trays under one clique ID.
A gang planned on such a domain runs slower than planned, or not at all.
``validate`` compares every domain with its platform (``nodes_per_domain``
nodes of ``gpus_per_node`` GPUs, one product) and says what differs:

* ``error``: the domain cannot be what its label says: more nodes than the
  platform's domain holds (one label on two racks), nodes of different
  platforms under one label, a node with fewer GPUs than its platform has,
  a node claiming a domain whose other nodes agree without it, a node of a
  multi-node platform without a domain label;
* ``warning``: the domain is short of nodes (a tray missing, or out for
  repair): smaller than promised, still one domain.

Who is in a domain is what its nodes say: each node's own labels name its
domain, and a node-local agent (the kubelet, or a labelling DaemonSet) can
set them on its own Node. So when the nodes under one label cannot all be
one domain (more than the platform's domain holds, or several products),
``judge`` looks for the odd ones out before it condemns the label
(``disputes``): the nodes that agree on everything else that places them
(their product, the other labels naming their fabric, GPU Feature
Discovery's IMEX domain, the levels above the domain) and are a strict majority of the label's nodes, no more than one
domain holds, keep the domain; every other node is detached alone,
``disputed-member``. One node claiming another rack's clique so detaches
itself, not the 18 trays it joined. When no such majority exists (two whole
racks under one clique, or an intruder that copied every label) the
evidence cannot tell, and every node of the label is detached, as before.
Which node came last is no evidence: a rule must give every replica, and a
restart, the same answer from the same state.

A person who has looked may acknowledge a domain's findings with the label
``TOPOLOGY_ACK`` (``kilter.dev.node-restriction.kubernetes.io/topology-ack``)
set to the domain's ID on one of its nodes. The NodeRestriction admission
plugin refuses a kubelet any change to a label under
``node-restriction.kubernetes.io`` (or a subdomain of it) on its own Node,
so the node a finding is about cannot write it; the value names the domain,
so an acknowledgement given to one rack does not travel with a node that
relabels itself into another. An acknowledgement accepts a node short of
GPUs and products mixed under one label; it never accepts more nodes than
a platform's fabric connects, nor a disputed member (fix the label, or the
catalog with ``--platforms``). The old ``kilter.dev/topology-ack=true``,
which a node can set on itself, acknowledges nothing; a domain in error that
carries it says so (``ack-ignored``).

The nodes' health (Ready, cordons, health signals) is not judged here:
that is the fleet's availability, which changes by the minute; this is the
shape, which should not.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from kilter.model import quantity
from kilter.model.annotations import TOPOLOGY_ACK, UNPROTECTED_TOPOLOGY_ACK
from kilter.model.core_v1 import Node
from kilter.model.errors import InputError, UnknownPlatform
from kilter.model.kueue import Topology
from kilter.model.volcano import HyperNode
from kilter.topology.catalog import Catalog, Platform
from kilter.topology.hypernodes import SOURCE as HYPERNODES
from kilter.topology.hypernodes import with_hypernode_labels
from kilter.topology.labels import Levels, choose_levels
from kilter.topology.unknown_hardware import UnknownHardware

__all__ = [
    "IMEX_DOMAIN",
    "READ_ERRORS",
    "UNACKNOWLEDGEABLE",
    "Claim",
    "Finding",
    "Judgement",
    "Report",
    "agreed_keys",
    "device_counts",
    "disputes",
    "judge",
    "mixed",
    "shape_errors",
    "validate",
]

IMEX_DOMAIN = "nvidia.com/gpu.imex-domain"
"""GPU Feature Discovery's second fabric label (``<IMEX domain ID>.<clique ID>``): set beside the clique label from
the same node's IMEX configuration, alike on every node of one IMEX domain."""

UNACKNOWLEDGEABLE = frozenset({"too-many-nodes", "disputed-member"})
"""Findings no acknowledgement accepts: either would let a gang be planned over a fabric some node is not on."""

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    """One way a domain (or a node of it) differs from its platform's shape."""

    domain: str
    platform: str
    kind: str  # trays-missing, too-many-nodes, mixed-platforms, gpus-short, disputed-member, domain-label-missing,
    # unknown-platform, unknown-product, gpus-unreadable, ack-ignored
    severity: Severity
    nodes: tuple[str, ...]
    message: str


@dataclass(frozen=True)
class Report:
    """Every finding, and how many domains of each platform were looked at."""

    findings: tuple[Finding, ...] = ()
    domains: dict[str, int] = field(default_factory=dict)  # platform -> domains seen

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")

    def domains_with_errors(self) -> frozenset[str]:
        return frozenset(f.domain for f in self.errors)


READ_ERRORS = (InputError, ArithmeticError, ValueError)
"""What reading a device count can raise: "1e10000000" is a ``decimal.Overflow``, not an ``InputError``."""


def device_counts(node: Node, resources: Sequence[str]) -> dict[str, int]:
    """The node's count of each device resource it offers (allocatable, else capacity); one of ``READ_ERRORS``
    if one is no whole number >= 0. The fleet and ``validate`` read a node's GPUs alike."""
    alloc = node.status.allocatable or node.status.capacity
    devices: dict[str, int] = {}
    for r in resources:
        raw = alloc.get(r)
        if raw is not None:
            devices[r] = quantity.to_count(raw, path=f"status.allocatable[{r}]")
    return devices


def _gpus(node: Node, resource: str) -> int | None:
    try:
        return device_counts(node, (resource,)).get(resource)
    except READ_ERRORS:
        return None


def shape_errors(domain: str, platform: Platform, members: Sequence[tuple[str, int]]) -> list[Finding]:
    """The findings of one domain of ``platform`` from its nodes' (name, GPUs): what the fleet model and
    ``validate`` both judge a domain by."""
    names = tuple(n for n, _ in members)
    out = [
        Finding(
            domain,
            platform.name,
            "gpus-short",
            "error",
            (name,),
            f"node {name} offers {gpus} {platform.device_resource}, a {platform.name} node has "
            f"{platform.gpus_per_node}",
        )
        for name, gpus in members
        if gpus < platform.gpus_per_node
    ]
    expected = platform.nodes_per_domain
    if len(members) > expected:
        out.append(
            Finding(
                domain,
                platform.name,
                "too-many-nodes",
                "error",
                names,
                f"domain {domain} has {len(members)} nodes, a {platform.name} domain holds {expected}: its label is "
                "shared by more than one rack",
            )
        )
    elif len(members) < expected:
        out.append(
            Finding(
                domain,
                platform.name,
                "trays-missing",
                "warning",
                names,
                f"domain {domain} has {len(members)} of its {expected} nodes",
            )
        )
    return out


def mixed(domain: str, kinds: Sequence[str], names: tuple[str, ...]) -> Finding:
    return Finding(
        domain,
        "/".join(kinds),
        "mixed-platforms",
        "error",
        names,
        f"domain {domain} holds nodes of {', '.join(kinds)}: one scale-up domain is one product",
    )


@dataclass(frozen=True)
class Claim:
    """A node under a domain label: its name, platform, GPUs, and the labels that place it."""

    name: str
    platform: Platform
    gpus: int
    labels: Mapping[str, str]


def agreed_keys(levels: Levels, platforms: Iterable[Platform]) -> tuple[str, ...]:
    """The labels every node of one domain carries alike, whichever of them names the domain: each label that may
    name it (they name one fabric), ``IMEX_DOMAIN``, and the labels of the levels above it (kilter puts a domain in
    one group per level, read off any one of its nodes)."""
    keys: dict[str, None] = {}
    for p in platforms:
        keys.update(dict.fromkeys(levels.domain_keys(p)))
    keys.update(dict.fromkeys((IMEX_DOMAIN, *levels.up_keys)))
    return tuple(keys)


def disputes(
    domain: str, claims: Sequence[Claim], keys: Sequence[str]
) -> tuple[tuple[Claim, ...], tuple[Finding, ...]]:
    """The claims kept as the domain, and a ``disputed-member`` finding per node detached alone (module docstring).

    Only claims that cannot all be one domain (more than the platform's
    domain holds, or several platforms) are told apart: the group agreeing
    on platform and every one of ``keys`` keeps the domain when it is more
    than half of the claims and no more than its platform's domain holds.
    Otherwise every claim is kept and nothing is found here: the shape
    findings condemn the label whole.
    """
    first = claims[0].platform
    if all(c.platform.name == first.name for c in claims) and len(claims) <= first.nodes_per_domain:
        return tuple(claims), ()
    groups: dict[tuple[str, tuple[str | None, ...]], list[Claim]] = {}
    for c in claims:
        groups.setdefault((c.platform.name, tuple(c.labels.get(k) for k in keys)), []).append(c)
    kept = max(groups.values(), key=len)  # a tie is never more than half: every claim is kept below
    if 2 * len(kept) <= len(claims) or len(kept) > kept[0].platform.nodes_per_domain:
        return tuple(claims), ()
    names = {c.name for c in kept}
    found = tuple(
        Finding(
            domain,
            c.platform.name,
            "disputed-member",
            "error",
            (c.name,),
            f"node {c.name} claims domain {domain}, whose other {len(kept)} nodes agree without it "
            f"({_difference(c, kept[0], keys)}): it is detached alone",
        )
        for c in claims
        if c.name not in names
    )
    return tuple(kept), found


def _difference(odd: Claim, agreed: Claim, keys: Sequence[str]) -> str:
    """What sets ``odd`` apart from the nodes that agree (``agreed`` is one of them), the first three facts."""
    out = [] if odd.platform.name == agreed.platform.name else [f"{odd.platform.name}, not {agreed.platform.name}"]
    for k in keys:
        mine, theirs = odd.labels.get(k), agreed.labels.get(k)
        if mine != theirs:
            out.append(f"{k}={mine or '(none)'} where they have {theirs or '(none)'}")
    return "; ".join(out[:3])


@dataclass(frozen=True)
class Judgement:
    """A domain label's findings (acknowledged ones as warnings) and the nodes the fleet detaches alone."""

    findings: tuple[Finding, ...]
    detached: frozenset[str]
    split: bool  # no node is left under the label: it is not believed at all


def judge(domain: str, claims: Sequence[Claim], keys: Sequence[str]) -> Judgement:
    """Every finding of the nodes under one domain label, and which of them the fleet detaches: the disputed
    members, then a node short of GPUs, or every node the label kept when its shape is wrong; an acknowledgement
    (``TOPOLOGY_ACK`` naming ``domain`` on a node kept) accepts all but ``UNACKNOWLEDGEABLE`` (module docstring)."""
    kept, disputed = disputes(domain, claims, keys)
    kinds = sorted({c.platform.name for c in kept})
    names = tuple(c.name for c in kept)
    shape = (
        [mixed(domain, kinds, names)]
        if len(kinds) > 1
        else shape_errors(domain, kept[0].platform, [(c.name, c.gpus) for c in kept])
    )
    acked = any(c.labels.get(TOPOLOGY_ACK) == domain for c in kept)
    findings: list[Finding] = list(disputed)
    standing: list[Finding] = []
    for f in shape:
        if f.severity == "error" and acked and f.kind not in UNACKNOWLEDGEABLE:
            note = f"{f.message} (acknowledged: {TOPOLOGY_ACK}={domain})"
            f = dataclasses.replace(f, severity="warning", message=note)
        elif f.severity == "error":
            standing.append(f)
        findings.append(f)
    split = any(f.kind != "gpus-short" for f in standing)
    detached = {f.nodes[0] for f in disputed}
    detached |= set(names) if split else {n for f in standing for n in f.nodes}
    carriers = tuple(c.name for c in claims if UNPROTECTED_TOPOLOGY_ACK in c.labels)
    if carriers and (disputed or any(f.severity == "error" for f in shape)):
        findings.append(_ack_ignored(domain, "/".join(kinds), carriers))
    return Judgement(tuple(findings), frozenset(detached), split)


def _ack_ignored(domain: str, platform: str, carriers: tuple[str, ...]) -> Finding:
    return Finding(
        domain,
        platform,
        "ack-ignored",
        "warning",
        carriers,
        f"{UNPROTECTED_TOPOLOGY_ACK} on {', '.join(carriers[:3])}{' ...' if len(carriers) > 3 else ''} acknowledges "
        f"nothing: a node can set it on itself (a person's acknowledgement is {TOPOLOGY_ACK}={domain})",
    )


def validate(
    nodes: Iterable[Node],
    catalog: Catalog,
    *,
    topologies: Iterable[Topology] = (),
    hypernodes: Sequence[HyperNode] = (),
) -> Report:
    """The findings of every GPU node's domain, domains in name order; the domain labels and the levels above them
    chosen as the fleet model chooses them (a Kueue Topology, else Volcano HyperNodes, else known label schemes)."""
    topologies = list(topologies)
    nodes = sorted(nodes, key=lambda n: n.metadata.name)
    tier_keys: tuple[str, ...] = ()
    if hypernodes and not topologies:
        nodes, tier_keys = with_hypernode_labels(nodes, hypernodes)
    resources = sorted(catalog.device_resources)
    findings: list[Finding] = []
    matched: list[tuple[Node, Platform, int]] = []
    unknown = UnknownHardware(catalog)
    for node in nodes:
        name = node.metadata.name
        devices = {r: n for r in resources if (n := _gpus(node, r)) is not None}
        alloc = node.status.allocatable or node.status.capacity
        unread = [r for r in resources if r in alloc and r not in devices]
        if unread:
            message = (
                f"node {name}: {unread[0]} {str(alloc[unread[0]])[:40]!r} is no count of GPUs: the fleet leaves it out"
            )
            findings.append(Finding(name, "", "gpus-unreadable", "error", (name,), message))
            continue
        try:
            platform = catalog.match(node.metadata.labels, devices)
        except UnknownPlatform as exc:
            unknown.named(name, exc)
            continue
        if platform is not None and not unknown.fell_back(name, node.metadata.labels, platform):
            matched.append((node, platform, devices.get(platform.device_resource, 0)))
    for group in unknown.groups():  # an unknown product's nodes have no shape to judge: one finding says so
        severity: Severity = "error" if group.kind == "unknown-platform" or group.domained else "warning"
        findings.append(Finding(group.label, "", group.kind, severity, tuple(group.nodes), group.message))
    if tier_keys:
        levels = Levels(up_keys=tier_keys, source=HYPERNODES)
    else:
        levels = choose_levels([n.metadata.labels for n, _, gpus in matched if gpus > 0], topologies, catalog)
    members: dict[str, list[Claim]] = defaultdict(list)
    for node, platform, gpus in matched:
        name = node.metadata.name
        domain: str | None = name
        if platform.is_multi_node:
            label = levels.domain_label(platform, node.metadata.labels)
            domain = label[1] if label else None
        if domain is None:
            findings.append(
                Finding(
                    name,
                    platform.name,
                    "domain-label-missing",
                    "error",
                    (name,),
                    f"node {name} has no domain label ({', '.join(platform.domain_label_keys[:2])}, ...): it is no "
                    f"part of any {platform.name} domain (GPU Feature Discovery drops the clique label when the "
                    "fabric is down)",
                )
            )
            continue
        members[domain].append(Claim(name, platform, gpus, node.metadata.labels))
    counted: dict[str, int] = defaultdict(int)
    for domain, held in sorted(members.items()):
        counted[held[0].platform.name] += 1
        platforms = list({c.platform.name: c.platform for c in held}.values())
        findings.extend(judge(domain, held, agreed_keys(levels, platforms)).findings)
    order = {"error": 0, "warning": 1}
    findings.sort(key=lambda f: (f.domain, order[f.severity], f.kind, f.nodes))
    return Report(tuple(findings), dict(sorted(counted.items())))

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
  a node of a multi-node platform without a domain label;
* ``warning``: the domain is short of nodes (a tray missing, or out for
  repair): smaller than promised, still one domain.

The nodes' health (Ready, cordons, health signals) is not judged here:
that is the fleet's availability, which changes by the minute; this is the
shape, which should not.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from kilter.model import quantity
from kilter.model.annotations import TOPOLOGY_ACK
from kilter.model.core_v1 import Node
from kilter.model.errors import InputError, UnknownPlatform
from kilter.topology.catalog import Catalog, Platform

__all__ = ["ACK_VALUE", "READ_ERRORS", "Finding", "Report", "device_counts", "mixed", "shape_errors", "validate"]

ACK_VALUE = "true"
"""The value of ``kilter.dev/topology-ack`` on a node that acknowledges its domain's findings."""

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    """One way a domain (or a node of it) differs from its platform's shape."""

    domain: str
    platform: str
    kind: str  # trays-missing, too-many-nodes, mixed-platforms, gpus-short, domain-label-missing, unknown-platform
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


def _domain_label(node: Node, platform: Platform) -> str | None:
    labels = node.metadata.labels
    return next((labels[k] for k in platform.domain_label_keys if labels.get(k)), None)


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


def validate(nodes: Iterable[Node], catalog: Catalog) -> Report:
    """The findings of every GPU node's domain, domains in name order."""
    resources = sorted(catalog.device_resources)
    members: dict[str, list[tuple[str, Platform, int]]] = defaultdict(list)
    acked: set[str] = set()
    findings: list[Finding] = []
    for node in sorted(nodes, key=lambda n: n.metadata.name):
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
            findings.append(Finding(name, "", "unknown-platform", "error", (name,), str(exc)))
            continue
        if platform is None:
            continue
        gpus = devices.get(platform.device_resource, 0)
        domain = _domain_label(node, platform) if platform.is_multi_node else name
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
        members[domain].append((name, platform, gpus))
        if node.metadata.labels.get(TOPOLOGY_ACK) == ACK_VALUE:
            acked.add(domain)
    counted: dict[str, int] = defaultdict(int)
    for domain, held in sorted(members.items()):
        kinds = sorted({p.name for _, p, _ in held})
        platform = held[0][1]
        counted[platform.name] += 1
        found = (
            [mixed(domain, kinds, tuple(n for n, _, _ in held))]
            if len(kinds) > 1
            else shape_errors(domain, platform, [(n, g) for n, _, g in held])
        )
        if domain in acked:  # shown, no longer failing the check: what the fleet model does with it too
            found = [
                dataclasses.replace(f, severity="warning", message=f"{f.message} (acknowledged: {TOPOLOGY_ACK})")
                for f in found
            ]
        findings.extend(found)
    order = {"error": 0, "warning": 1}
    findings.sort(key=lambda f: (f.domain, order[f.severity], f.kind, f.nodes))
    return Report(tuple(findings), dict(sorted(counted.items())))

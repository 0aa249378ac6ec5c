"""The steps ``fleet.build_fleet`` takes from Node and Pod objects to the arrays of the fleet model.

Each step is one rule of the fleet (``fleet``'s docstring says them all):
which nodes are GPU nodes and how many devices each offers (``gpu_nodes``),
which domain each belongs to and which domain labels are not believed
(``domains_of``, ``detach_misshapen``), how nodes and domains are numbered
(``NodeLayout``), the groups above the domains (``groups_above``), the taint
classes (``taint_classes``) and the GPUs bound pods hold (``booked``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kilter._native import domains
from kilter.model.annotations import TOPOLOGY_ACK
from kilter.model.core_v1 import Node, Pod, Taint
from kilter.model.errors import InputError, UnknownPlatform
from kilter.topology import pod_gpus, validate
from kilter.topology.catalog import Catalog, Platform
from kilter.topology.health import BLOCKING_EFFECTS, HEALTH_TAINT_PREFIX, HealthSignals
from kilter.topology.labels import Levels, group_path
from kilter.topology.unknown_hardware import UnknownHardware
from kilter.topology.validate import READ_ERRORS, device_counts

__all__ = [
    "ENDED_PHASES",
    "MAX_NODE_GPUS",
    "Members",
    "NodeLayout",
    "TaintKey",
    "booked",
    "detach_misshapen",
    "domains_of",
    "gpu_nodes",
    "groups_above",
    "next_pow2",
    "scheduling_taints",
    "taint_classes",
    "unreadable_pod",
]

ENDED_PHASES = ("Succeeded", "Failed")
MAX_NODE_GPUS = 4096  # far above any node (CPX-partitioned MI300X shows 64); keeps the model's int16 counts safe

TaintKey = tuple[str, str, str]


def unreadable_pod(pod: Pod, count: pod_gpus.Unreadable) -> str:
    """The line naming a bound pod whose GPU count does not read and the node it is taken to hold whole: the
    fleet's warnings and the store's ``/readyz`` lines say it alike."""
    meta = pod.metadata
    return f"pod {meta.namespace}/{meta.name}: {count.why}; node {pod.spec.node_name} counted as full"


def scheduling_taints(taints: Sequence[Taint]) -> tuple[TaintKey, ...]:
    """The taints a pod must tolerate to be placed on the node (NoSchedule, NoExecute), health taints aside:
    those make the node unusable instead."""
    return tuple(
        sorted(
            (t.key, t.value, t.effect)
            for t in taints
            if t.effect in BLOCKING_EFFECTS and not t.key.startswith(HEALTH_TAINT_PREFIX)
        )
    )


def next_pow2(n: int) -> int:
    """The smallest power of two >= n, for n >= 1: a domain's tray width in the bitmap."""
    return 1 << max(0, (n - 1).bit_length())


Members = dict[tuple[str, int, bool], list[tuple[str, Node, int]]]
"""(domain id, platform index, detached) -> its nodes as (name, Node, GPUs)."""


def gpu_nodes(
    nodes: Iterable[Node], catalog: Catalog, unreadable: dict[str, str], warnings: list[str]
) -> list[tuple[Node, Platform, int]]:
    """Each GPU node with its platform and device count; a node whose count does not read, or is beyond any real
    node, is left out and named in ``unreadable``; a node of no or an unknown platform is left out."""
    out: list[tuple[Node, Platform, int]] = []
    resources = sorted(catalog.device_resources)
    unknown = UnknownHardware(catalog)
    for node in nodes:
        try:
            devices = device_counts(node, resources)
        except READ_ERRORS as exc:
            why = str(exc) if isinstance(exc, InputError) else "a device count beyond any number kilter holds"
            unreadable[node.metadata.name] = f"node {node.metadata.name}: {why}; node ignored"
            warnings.append(unreadable[node.metadata.name])
            continue
        try:
            platform = catalog.match(node.metadata.labels, devices)
        except UnknownPlatform as exc:
            unknown.named(node.metadata.name, exc)
            continue
        if platform is None:
            continue
        unknown.fell_back(node.metadata.name, node.metadata.labels, platform)
        count = devices.get(platform.device_resource, 0)
        if count > MAX_NODE_GPUS:
            shown = str(count) if count < 10**12 else "over 10^12"  # str() of a 10^5000 raises
            why = f"node {node.metadata.name}: {shown} {platform.device_resource} is not a real node; node ignored"
            unreadable[node.metadata.name] = why
            warnings.append(why)
            continue
        if count <= 0:
            warnings.append(
                f"node {node.metadata.name}: labelled {platform.name} but offers no {platform.device_resource}"
            )
            continue
        out.append((node, platform, count))
    warnings.extend(g.message for g in unknown.groups())
    return out


def domains_of(
    gpu_nodes: Sequence[tuple[Node, Platform, int]], platforms: Sequence[Platform], levels: Levels, fabric: list[str]
) -> Members:
    """The nodes grouped into domains by their domain label (a node of a multi-node platform without one is a
    detached domain of its own; a single-node platform's node is its own domain), then ``detach_misshapen``."""
    plat_index = {p.name: i for i, p in enumerate(platforms)}
    members: Members = {}
    for node, platform, count in gpu_nodes:
        name = node.metadata.name
        key: tuple[str, int, bool]
        if platform.is_multi_node:
            label = levels.domain_label(platform, node.metadata.labels)
            key = (label[1], plat_index[platform.name], False) if label else (name, plat_index[platform.name], True)
        else:
            key = (name, plat_index[platform.name], False)
        members.setdefault(key, []).append((name, node, count))
    return detach_misshapen(members, platforms, levels, fabric)


@dataclass
class NodeLayout:
    """Nodes and domains numbered as the bitmap holds them: domains in key order, nodes in name order inside
    them; per node its name, labels, scheduling taints, domain, GPUs and usability; per domain its first node,
    tray size, platform, flags and ID."""

    node_names: list[str] = field(default_factory=list)
    node_labels: list[dict[str, str]] = field(default_factory=list)
    node_taints: list[tuple[TaintKey, ...]] = field(default_factory=list)
    node_domain: list[int] = field(default_factory=list)
    node_gpus: list[int] = field(default_factory=list)
    node_usable: list[int] = field(default_factory=list)
    unusable: dict[str, str] = field(default_factory=dict)
    node_start: list[int] = field(default_factory=lambda: [0])
    tray_bits: list[int] = field(default_factory=list)
    dom_platform: list[int] = field(default_factory=list)
    dom_flags: list[int] = field(default_factory=list)
    domain_ids: list[str] = field(default_factory=list)
    node_index: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(
        cls, members: Members, platforms: Sequence[Platform], health: HealthSignals, warnings: list[str]
    ) -> NodeLayout:
        """The layout of ``members``; InputError for a node named twice. A domain ID two platforms share is
        suffixed with the platform (``r1@GB200-NVL72``); a domain with more nodes than its platform's is warned of."""
        out = cls()
        domain_keys = sorted(members)
        ids = Counter(key[0] for key in domain_keys)
        unusable_reason = health.unusable_reason
        for d, key in enumerate(domain_keys):
            dom_id, p_index, detached = key
            ms = sorted(members[key], key=lambda m: m[0])
            platform = platforms[p_index]
            for name, node, count in ms:
                if name in out.node_index:
                    raise InputError(f"node {name} appears twice in the snapshot")
                out.node_index[name] = len(out.node_names)
                out.node_names.append(name)
                out.node_labels.append(node.metadata.labels)
                out.node_taints.append(scheduling_taints(node.spec.taints))
                out.node_domain.append(d)
                out.node_gpus.append(count)
                fault = unusable_reason(node)
                out.node_usable.append(1 if fault is None else 0)
                if fault is not None:
                    out.unusable[name] = fault
            out.node_start.append(len(out.node_names))
            out.tray_bits.append(next_pow2(max(max(m[2] for m in ms), platform.gpus_per_node if not detached else 1)))
            out.dom_platform.append(p_index)
            out.dom_flags.append(domains.DETACHED if detached else 0)
            out.domain_ids.append(dom_id if ids[dom_id] == 1 else f"{dom_id}@{platform.name}")
            if platform.is_multi_node and not detached and len(ms) > platform.nodes_per_domain:
                warnings.append(
                    f"domain {dom_id} has {len(ms)} {platform.name} nodes, "
                    f"more than the platform's {platform.nodes_per_domain}"
                )
        return out


def groups_above(
    levels: Levels, node_labels: Sequence[Mapping[str, str]], node_start: Sequence[int]
) -> tuple[npt.NDArray[np.int32], list[list[str]]]:
    """Per level above the domain, each domain's group index (-1: a label is missing) and the groups' names
    (their paths, sorted), read off each domain's first node."""
    n_domains = len(node_start) - 1
    n_levels = len(levels.up_keys)
    group = np.full((n_levels, n_domains), -1, dtype=np.int32)
    group_ids: list[list[str]] = []
    for level in range(n_levels):
        paths = [group_path(node_labels[node_start[d]], levels.up_keys, level) for d in range(n_domains)]
        uniq = sorted({p for p in paths if p is not None})
        idx = {p: i for i, p in enumerate(uniq)}
        for d, p in enumerate(paths):
            if p is not None:
                group[level, d] = idx[p]
        group_ids.append(["/".join(p) for p in uniq])
    return group, group_ids


def taint_classes(
    node_taints: Sequence[tuple[TaintKey, ...]],
) -> tuple[npt.NDArray[np.int16], list[tuple[TaintKey, ...]]]:
    """Per node, the index of its set of scheduling taints, and the sets in index order (0: none)."""
    taint_index: dict[tuple[TaintKey, ...], int] = {(): 0}
    taint_class = np.fromiter(
        (taint_index.setdefault(t, len(taint_index)) for t in node_taints),
        dtype=np.int16,
        count=len(node_taints),
    )
    return taint_class, [t for t, _ in sorted(taint_index.items(), key=lambda kv: kv[1])]


def booked(
    pods: Iterable[Pod],
    layout: NodeLayout,
    platforms: Sequence[Platform],
    gpus: npt.NDArray[np.int32],
    unreadable_pods: dict[str, str],
    warnings: list[str],
) -> npt.NDArray[np.int64]:
    """GPUs the bound, running pods hold per node, at most the node's: a pod whose count does not read holds its
    node whole (``pod_gpus``) and is named in ``unreadable_pods``."""
    used = np.zeros(len(layout.node_names), dtype=np.int64)
    node_resource = [platforms[layout.dom_platform[d]].device_resource for d in layout.node_domain]
    node_gpus = layout.node_gpus
    for pod in pods:
        i = layout.node_index.get(pod.spec.node_name) if pod.spec.node_name else None
        if i is None or pod.status.phase in ENDED_PHASES:
            continue
        held = pod_gpus.count(pod.spec, node_resource[i], path="spec")
        if isinstance(held, pod_gpus.Unreadable):
            unreadable_pods[f"{pod.metadata.namespace}/{pod.metadata.name}"] = why = unreadable_pod(pod, held)
            warnings.append(why)
            held = node_gpus[i]  # what it holds is unknown: nothing else is placed beside it
        used[i] += min(held, node_gpus[i])  # each pod at most its node: a sum of capped counts stays an int64
    over = np.nonzero(used > gpus)[0]
    for i in over[:5]:
        warnings.append(f"node {layout.node_names[i]}: pods hold {used[i]} GPUs of {gpus[i]}; counted as full")
    return np.minimum(used, gpus)


def detach_misshapen(members: Members, platforms: Sequence[Platform], levels: Levels, fabric: list[str]) -> Members:
    """The multi-node domains as ``validate.judge`` believes them: a node whose label claims a domain the others
    under it disagree with is detached alone, a node short of GPUs is detached alone (its rack's fabric is whole;
    the device plugin also lowers a node's count when a GPU turns unhealthy), and every node of a label whose shape
    is an error (more nodes than the platform's domain, products mixed) is detached, unless acknowledged. A
    detached node is a domain of its own and takes single-pod gangs only: a gang planned across the label would not
    get the fabric it was planned for. ``fabric`` gets one line per domain so judged."""
    out: Members = {}
    claimed: dict[str, list[tuple[int, str, Node, int]]] = {}
    for key, held in members.items():
        dom_id, p_index, detached = key
        if detached or not platforms[p_index].is_multi_node:
            out.setdefault(key, []).extend(held)
            continue
        claimed.setdefault(dom_id, []).extend((p_index, name, node, count) for name, node, count in held)
    for dom_id, under in sorted(claimed.items()):
        under.sort(key=lambda m: m[1])  # by name: the findings and their order never depend on the input's
        claims = [validate.Claim(name, platforms[p], count, node.metadata.labels) for p, name, node, count in under]
        keys = validate.agreed_keys(levels, [platforms[p] for p in sorted({p for p, _, _, _ in under})])
        judged = validate.judge(dom_id, claims, keys)
        for p_index, name, node, count in under:
            if name in judged.detached:
                out[(name, p_index, True)] = [(name, node, count)]
            else:
                out.setdefault((dom_id, p_index, False), []).append((name, node, count))
        fabric.extend(_fabric_lines(dom_id, judged))
    return out


def _fabric_lines(domain: str, judged: validate.Judgement) -> list[str]:
    """What the fleet did with one domain label's errors, one line each: each disputed member, then the label
    split whole or its short nodes detached (with how a person acknowledges it, where one can), then an
    acknowledgement a node set on itself."""
    lines = [f"domain {domain}: {f.message}" for f in judged.findings if f.kind == "disputed-member"]
    errors = [f for f in judged.findings if f.severity == "error" and f.kind != "disputed-member"]
    errors.sort(key=lambda f: f.kind == "gpus-short")  # what split the label first, a node short of GPUs after
    ack = f"{TOPOLOGY_ACK}={domain}"
    if judged.split:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        until = (
            "" if any(f.kind in validate.UNACKNOWLEDGEABLE for f in errors) else f" or a node of it is labelled {ack}"
        )
        lines.append(
            f"domain {domain}: {errors[0].message}{more}; its nodes take single-pod gangs only until it is fixed{until}"
        )
    elif errors:
        short = ", ".join(sorted(n for f in errors for n in f.nodes))
        lines.append(
            f"domain {domain}: {short} short of GPUs; taking single-pod gangs only until fixed or a node of it is "
            f"labelled {ack}"
        )
    lines += [f"domain {domain}: {f.message}" for f in judged.findings if f.kind == "ack-ignored"]
    return lines

"""Build the bitmap model of a fleet from Node and Pod objects, and keep it current.

This is the boundary where Kubernetes objects become arrays: every GPU node
gets an index (domains in name order, nodes in name order inside them), a
platform, a domain and its groups above the domain. After that, planning and
scoring touch only ``_native`` arrays; names come back only for output.

Availability rules: a node is unusable when a built-in rule or a configured
health signal says so (``health.py``: cordoned, not Ready, tainted
``node.kubernetes.io/*`` with NoSchedule or NoExecute, AMD's mesh validation
failed, then the conditions, taints and labels GPU health tools set); the
fleet keeps each unusable node's reason (``unusable_reason``). A node of a
multi-node platform without its domain label (GPU Feature Discovery drops
``nvidia.com/gpu.clique`` when the fabric is unhealthy) becomes a detached
one-node domain that only single-pod gangs may use, and so does a node the
domain labels are not believed for (``validate.judge``: a node claiming a
domain whose other nodes agree without it, a node short of GPUs, every node
of a label on more nodes than one domain holds), each named in ``fabric``.
Other NoSchedule and NoExecute taints are matched per pod against its
tolerations.

One bad object must not make every answer about the others an error. A
node whose device count does not read as a whole number of devices
(``"abc"``, ``"-4"``, ``"0.5"``) or is far beyond any real node is left out
of the fleet with a warning and named in ``unreadable_nodes``; a bound pod
whose GPU request does not read as a count fills its node, with a warning,
and is named in ``unreadable_pods`` (``pod_gpus``: what it holds is
unknown, so nothing else is placed beside it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kilter._native import domains, jsonout, names
from kilter.model.annotations import TOPOLOGY_ACK
from kilter.model.core_v1 import Node, Pod, Taint
from kilter.model.errors import InputError, UnknownPlatform
from kilter.model.kueue import Topology
from kilter.model.volcano import HyperNode
from kilter.topology import pod_gpus, validate
from kilter.topology.catalog import BUILTIN, Catalog, Platform
from kilter.topology.health import BLOCKING_EFFECTS, DEFAULTS, HEALTH_TAINT_PREFIX, HealthSignals
from kilter.topology.hypernodes import SOURCE as HYPERNODES
from kilter.topology.hypernodes import with_hypernode_labels
from kilter.topology.labels import Levels, choose_levels, group_path
from kilter.topology.validate import READ_ERRORS, device_counts

__all__ = ["Fleet", "build_fleet", "is_node_usable", "unreadable_pod"]

ENDED_PHASES = ("Succeeded", "Failed")
MAX_NODE_GPUS = 4096  # far above any node (CPX-partitioned MI300X shows 64); keeps the model's int16 counts safe

TaintKey = tuple[str, str, str]


def unreadable_pod(pod: Pod, count: pod_gpus.Unreadable) -> str:
    """The line naming a bound pod whose GPU count does not read and the node it is taken to hold whole: the
    fleet's warnings and the store's ``/readyz`` lines say it alike."""
    meta = pod.metadata
    return f"pod {meta.namespace}/{meta.name}: {count.why}; node {pod.spec.node_name} counted as full"


def is_node_usable(node: Node, health: HealthSignals = DEFAULTS) -> bool:
    """No built-in rule and no health signal marks the node unusable (``HealthSignals.unusable_reason``)."""
    return health.unusable_reason(node) is None


def _scheduling_taints(taints: Sequence[Taint]) -> tuple[TaintKey, ...]:
    return tuple(
        sorted(
            (t.key, t.value, t.effect)
            for t in taints
            if t.effect in BLOCKING_EFFECTS and not t.key.startswith(HEALTH_TAINT_PREFIX)
        )
    )


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@dataclass
class Fleet:
    """The bitmap model plus the names and labels needed to speak about it.

    ``node_domain`` and ``domain_group`` are the fleet's fixed structure (which
    node sits in which domain and group); usage and health live in ``bitmap``.
    """

    bitmap: domains.FleetBitmap
    catalog: Catalog
    levels: Levels
    platforms: tuple[Platform, ...]
    node_names: list[str]
    node_index: dict[str, int]
    name_index: names.NameIndex
    node_labels: list[dict[str, str]]
    node_taint_class: npt.NDArray[np.int16]
    taint_classes: list[tuple[TaintKey, ...]]
    domain_ids: list[str]
    group_ids: list[list[str]]
    node_domain: npt.NDArray[np.int32]
    domain_group: npt.NDArray[np.int32]
    warnings: list[str] = field(default_factory=list)
    unreadable_nodes: dict[str, str] = field(default_factory=dict)  # left out, by name: why (its device count)
    unreadable_pods: dict[str, str] = field(default_factory=dict)  # bound, count unreadable, by namespace/name: why
    fabric: list[str] = field(default_factory=list)  # domain labels not believed as given: what was detached, why
    spare_nodes: npt.NDArray[np.int32] | None = None  # per domain, spare nodes asked for (``spares.assign``)
    spares_lent: npt.NDArray[np.bool_] | None = None  # per domain, spares lent to preemptible pods (``spares.assign``)
    unusable: dict[str, str] = field(default_factory=dict)  # unusable nodes of the fleet, by name: why, name order
    _label_codes: dict[str, tuple[npt.NDArray[np.int32], dict[str, int]]] = field(default_factory=dict)
    _label_keys: frozenset[str] | None = None
    _absent: npt.NDArray[np.int32] | None = None
    _json_names: jsonout.JsonNames | None = None
    _idle_cover: dict[tuple[bytes, int, tuple[tuple[int, int], ...]], int] = field(default_factory=dict)

    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    def platform_of_node(self, node: int) -> Platform:
        return self.platforms[int(self.bitmap.domain_platforms[self.node_domain[node]])]

    def domain_of_node(self, node: int) -> str:
        return self.domain_ids[int(self.node_domain[node])]

    def domain_label_key(self, platform: Platform) -> str | None:
        """The label key the platform's nodes name their domain by (``Levels.carried_domain_key``); None for a
        single-node platform or when no node of it carries one."""
        index = self.platforms.index(platform)
        of_node = self.bitmap.domain_platforms[self.node_domain]
        return self.levels.carried_domain_key(
            platform, (self.node_labels[i] for i in np.flatnonzero(of_node == index).tolist())
        )

    def unusable_reason(self, name: str) -> str | None:
        """Why node ``name`` is unusable (``condition GpuNvlinkWatch=True (NVSentinel)``); None when it is usable
        or not in the fleet."""
        return self.unusable.get(name)

    def idle_cover_memo(self) -> dict[tuple[bytes, int, tuple[tuple[int, int], ...]], int]:
        """``split_wait.fewest_domains_idle``'s answers, keyed by the nodes' usability and GPU counts they were
        computed from (so a node failing or coming back misses), the platform and the pod shapes."""
        if len(self._idle_cover) > 4096:
            self._idle_cover.clear()
        return self._idle_cover

    def json_names(self) -> jsonout.JsonNames:
        """The node names pre-encoded as JSON strings, for answers written from indices; built once per fleet."""
        if self._json_names is None:
            self._json_names = jsonout.JsonNames(self.node_names)
        return self._json_names

    def has_label_key(self, key: str) -> bool:
        """Some node of the fleet carries label ``key`` (any value)."""
        if self._label_keys is None:
            self._label_keys = frozenset(k for labels in self.node_labels for k in labels)
        return key in self._label_keys

    @property
    def label_cache_size(self) -> int:
        """How many label keys have codes kept: never more than the distinct keys the nodes carry."""
        return len(self._label_codes)

    def label_codes(self, key: str) -> tuple[npt.NDArray[np.int32], dict[str, int]]:
        """Per node, a code for its value of label ``key`` (-1 = absent); built once per key.

        Only keys some node carries are kept, so the cache is bounded by the
        fleet's own labels, not by what pods name: a pod's selector may name
        any number of keys (100,000 took a server from 62 MB to 2.1 GB), and a
        key no node carries gets one shared, read-only all-absent array.
        """
        cached = self._label_codes.get(key)
        if cached is None and not self.has_label_key(key):
            if self._absent is None:
                self._absent = np.full(self.n_nodes, -1, dtype=np.int32)
                self._absent.flags.writeable = False
            return self._absent, {}
        if cached is None:
            values: dict[str, int] = {}
            codes = np.fromiter(
                (
                    values.setdefault(v, len(values)) if (v := labels.get(key)) is not None else -1
                    for labels in self.node_labels
                ),
                dtype=np.int32,
                count=len(self.node_labels),
            )
            cached = (codes, values)
            self._label_codes[key] = cached
        return cached

    def summary(self) -> dict[str, object]:
        """Counts for people: nodes, domains, GPUs, usage per platform."""
        bm = self.bitmap
        out: dict[str, object] = {}
        plat = bm.domain_platforms
        free = bm.domain_free_gpus
        usable = bm.domain_usable_gpus
        detached = (bm.domain_flags & domains.DETACHED) != 0
        wholly_idle = bm.wholly_free() != 0
        sizes = np.diff(bm.domain_node_start)
        gpus = bm.node_gpu_counts
        for i, p in enumerate(self.platforms):
            sel = plat == i
            if not sel.any():
                continue
            out[p.name] = {
                "nodes": int(sizes[sel].sum()),
                "domains": int((sel & ~detached).sum()),
                "detachedNodes": int((sel & detached).sum()),
                "gpus": int(gpus[np.repeat(sel, sizes)].sum()),
                "usableGpus": int(usable[sel].sum()),
                "idleGpus": int(free[sel].sum()),
                "whollyIdleDomains": int((sel & wholly_idle & ~detached).sum()),
            }
        return out


def build_fleet(
    nodes: Iterable[Node],
    pods: Iterable[Pod] = (),
    *,
    catalog: Catalog | None = None,
    topologies: Iterable[Topology] = (),
    hypernodes: Sequence[HyperNode] = (),
    health: HealthSignals = DEFAULTS,
) -> Fleet:
    """The fleet model of these nodes with the GPUs of these (bound, running) pods booked.

    Volcano HyperNodes become topology levels (``hypernodes.py``) when no
    Kueue Topology is given. ``health``: the signals beyond the built-in rules
    that make a node unusable (``health.DEFAULTS`` unless configured).
    """
    catalog = catalog or Catalog(BUILTIN)
    topologies = list(topologies)
    tier_keys: tuple[str, ...] = ()
    if hypernodes and not topologies:
        nodes, tier_keys = with_hypernode_labels(list(nodes), hypernodes)
    warnings: list[str] = []
    unreadable: dict[str, str] = {}
    gpu_nodes: list[tuple[Node, Platform, int]] = []
    resources = sorted(catalog.device_resources)
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
            warnings.append(f"node {node.metadata.name}: {exc}; node ignored")
            continue
        if platform is None:
            continue
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
        gpu_nodes.append((node, platform, count))

    if tier_keys:
        levels = Levels(up_keys=tier_keys, source=HYPERNODES)
    else:
        levels = choose_levels([n.metadata.labels for n, _, _ in gpu_nodes], topologies, catalog)
    platforms = tuple(sorted({p for _, p, _ in gpu_nodes}, key=catalog.index))
    plat_index = {p.name: i for i, p in enumerate(platforms)}

    # Group nodes into domains: (domain id, platform index, detached) -> [nodes].
    members: dict[tuple[str, int, bool], list[tuple[str, Node, int]]] = {}
    for node, platform, count in gpu_nodes:
        name = node.metadata.name
        labels = node.metadata.labels
        key: tuple[str, int, bool]
        if platform.is_multi_node:
            label = levels.domain_label(platform, labels)
            key = (label[1], plat_index[platform.name], False) if label else (name, plat_index[platform.name], True)
        else:
            key = (name, plat_index[platform.name], False)
        members.setdefault(key, []).append((name, node, count))

    fabric: list[str] = []
    members = _detach_misshapen(members, platforms, levels, fabric)
    warnings.extend(fabric)
    domain_keys = sorted(members)
    seen_names: set[str] = set()
    node_names: list[str] = []
    node_labels: list[dict[str, str]] = []
    node_taints: list[tuple[TaintKey, ...]] = []
    node_domain: list[int] = []
    node_gpus: list[int] = []
    node_usable: list[int] = []
    unusable: dict[str, str] = {}
    unusable_reason = health.unusable_reason
    node_start = [0]
    tray_bits: list[int] = []
    dom_platform: list[int] = []
    dom_flags: list[int] = []
    domain_ids: list[str] = []
    counts_by_id: dict[str, int] = {}
    for key in domain_keys:
        counts_by_id[key[0]] = counts_by_id.get(key[0], 0) + 1
    for d, key in enumerate(domain_keys):
        dom_id, p_index, detached = key
        ms = sorted(members[key], key=lambda m: m[0])
        platform = platforms[p_index]
        for name, node, count in ms:
            if name in seen_names:
                raise InputError(f"node {name} appears twice in the snapshot")
            seen_names.add(name)
            node_names.append(name)
            node_labels.append(node.metadata.labels)
            node_taints.append(_scheduling_taints(node.spec.taints))
            node_domain.append(d)
            node_gpus.append(count)
            fault = unusable_reason(node)
            node_usable.append(1 if fault is None else 0)
            if fault is not None:
                unusable[name] = fault
        node_start.append(len(node_names))
        tray_bits.append(_next_pow2(max(max(m[2] for m in ms), platform.gpus_per_node if not detached else 1)))
        dom_platform.append(p_index)
        dom_flags.append(domains.DETACHED if detached else 0)
        unique = counts_by_id[dom_id] == 1
        domain_ids.append(dom_id if unique else f"{dom_id}@{platform.name}")
        if platform.is_multi_node and not detached and len(ms) > platform.nodes_per_domain:
            warnings.append(
                f"domain {dom_id} has {len(ms)} {platform.name} nodes, "
                f"more than the platform's {platform.nodes_per_domain}"
            )

    node_index = {name: i for i, name in enumerate(node_names)}

    # Groups above the domain, from each domain's first node.
    n_levels = len(levels.up_keys)
    group = np.full((n_levels, len(domain_keys)), -1, dtype=np.int32)
    group_ids: list[list[str]] = []
    for level in range(n_levels):
        paths = [group_path(node_labels[node_start[d]], levels.up_keys, level) for d in range(len(domain_keys))]
        uniq = sorted({p for p in paths if p is not None})
        idx = {p: i for i, p in enumerate(uniq)}
        for d, p in enumerate(paths):
            if p is not None:
                group[level, d] = idx[p]
        group_ids.append(["/".join(p) for p in uniq])

    taint_index: dict[tuple[TaintKey, ...], int] = {(): 0}
    taint_class = np.fromiter(
        (taint_index.setdefault(t, len(taint_index)) for t in node_taints),
        dtype=np.int16,
        count=len(node_taints),
    )
    taint_classes = [t for t, _ in sorted(taint_index.items(), key=lambda kv: kv[1])]

    used = np.zeros(len(node_names), dtype=np.int64)
    node_resource = [platforms[dom_platform[d]].device_resource for d in node_domain]
    unreadable_pods: dict[str, str] = {}
    for pod in pods:
        i = node_index.get(pod.spec.node_name) if pod.spec.node_name else None
        if i is None or pod.status.phase in ENDED_PHASES:
            continue
        held = pod_gpus.count(pod.spec, node_resource[i], path="spec")
        if isinstance(held, pod_gpus.Unreadable):
            unreadable_pods[f"{pod.metadata.namespace}/{pod.metadata.name}"] = why = unreadable_pod(pod, held)
            warnings.append(why)
            held = node_gpus[i]  # what it holds is unknown: nothing else is placed beside it
        used[i] += min(held, node_gpus[i])  # each pod at most its node: a sum of capped counts stays an int64
    gpus_arr = np.asarray(node_gpus, dtype=np.int32)
    over = np.nonzero(used > gpus_arr)[0]
    for i in over[:5]:
        warnings.append(f"node {node_names[i]}: pods hold {used[i]} GPUs of {gpus_arr[i]}; counted as full")
    used = np.minimum(used, gpus_arr)

    bitmap = domains.FleetBitmap(
        np.asarray(node_domain, dtype=np.int32),
        gpus_arr,
        used.astype(np.int32),
        np.asarray(node_usable, dtype=np.uint8),
        np.asarray(node_start, dtype=np.int32),
        np.asarray(tray_bits, dtype=np.int32),
        np.asarray(dom_platform, dtype=np.int16),
        np.asarray(dom_flags, dtype=np.uint8),
        group,
    )
    return Fleet(
        bitmap=bitmap,
        catalog=catalog,
        levels=levels,
        platforms=platforms,
        node_names=node_names,
        node_index=node_index,
        name_index=names.NameIndex(node_names),
        node_labels=node_labels,
        node_taint_class=taint_class,
        taint_classes=taint_classes,
        domain_ids=domain_ids,
        group_ids=group_ids,
        node_domain=bitmap.node_domains,
        domain_group=bitmap.domain_groups,
        warnings=warnings,
        unreadable_nodes=dict(sorted(unreadable.items())),
        unreadable_pods=dict(sorted(unreadable_pods.items())),
        fabric=fabric,
        unusable=dict(sorted(unusable.items())),
    )


Members = dict[tuple[str, int, bool], list[tuple[str, Node, int]]]


def _detach_misshapen(members: Members, platforms: Sequence[Platform], levels: Levels, fabric: list[str]) -> Members:
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

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

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kilter._native import domains, jsonout, names
from kilter.model.core_v1 import Node, Pod
from kilter.model.kueue import Topology
from kilter.model.volcano import HyperNode
from kilter.topology import domain_names
from kilter.topology import fleet_parts as parts
from kilter.topology.catalog import BUILTIN, Catalog, Platform
from kilter.topology.fleet_parts import ENDED_PHASES, TaintKey, unreadable_pod
from kilter.topology.health import DEFAULTS, HealthSignals
from kilter.topology.hypernodes import SOURCE as HYPERNODES
from kilter.topology.hypernodes import with_hypernode_labels
from kilter.topology.labels import Levels, choose_levels

__all__ = ["ENDED_PHASES", "Fleet", "TaintKey", "build_fleet", "is_node_usable", "unreadable_pod"]


def is_node_usable(node: Node, health: HealthSignals = DEFAULTS) -> bool:
    """No built-in rule and no health signal marks the node unusable (``HealthSignals.unusable_reason``)."""
    return health.unusable_reason(node) is None


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
    _short_names: list[str] | None = None
    _name_of: dict[str, str] = field(default_factory=dict)
    _idle_cover: dict[tuple[bytes, int, tuple[tuple[int, int], ...]], int] = field(default_factory=dict)
    _domain_label_keys: dict[str, str | None] = field(default_factory=dict)

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
        if platform.name not in self._domain_label_keys:  # labels never change within one fleet: read once
            of_node = self.bitmap.domain_platforms[self.node_domain] == self.platforms.index(platform)
            self._domain_label_keys[platform.name] = self.levels.carried_domain_key(
                platform, (self.node_labels[i] for i in np.flatnonzero(of_node).tolist())
            )
        return self._domain_label_keys[platform.name]

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

    def domain_names(self) -> list[str]:
        """What views call each domain, aligned with ``domain_ids``: the operator's name for it, from its
        platform's ``domain_name_label`` on its first node, where no other domain has that name; else its short
        name (``domain_names.short_names``: its id if short, else the shortest unique prefix). Built once per
        fleet; do not change the list."""
        if self._short_names is None:
            given = [self._labelled_name(d) for d in range(len(self.domain_ids))]
            short = domain_names.short_names(self.domain_ids)
            taken = set(self.domain_ids) | set(short)
            counts = Counter(g for g in given if g)
            self._short_names = [
                name if name and counts[name] == 1 and (name not in taken or name == mine) else mine
                for name, mine in zip(given, short, strict=True)
            ]
            self._name_of = dict(zip(self.domain_ids, self._short_names, strict=True))
        return self._short_names

    def domain_name(self, domain: str) -> str:
        """What views call domain ``domain`` (``domain_names``); an id the fleet does not have is its own name."""
        self.domain_names()
        return self._name_of.get(domain, domain)

    def _labelled_name(self, d: int) -> str | None:
        key = self.platforms[int(self.bitmap.domain_platforms[d])].domain_name_label
        if key is None:
            return None
        return self.node_labels[int(self.bitmap.domain_node_start[d])].get(key) or None

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
    that make a node unusable (``health.DEFAULTS`` unless configured). The
    steps (``fleet_parts``), in order: read each node's platform and GPUs
    (``gpu_nodes``), choose the levels, group the nodes into domains and
    detach what the domain labels are not believed for (``domains_of``),
    number nodes and domains (``Layout``), name the groups above the domains
    (``groups_above``), class the taints and book the bound pods (``booked``).
    """
    catalog = catalog or Catalog(BUILTIN)
    topologies = list(topologies)
    tier_keys: tuple[str, ...] = ()
    if hypernodes and not topologies:
        nodes, tier_keys = with_hypernode_labels(list(nodes), hypernodes)
    warnings: list[str] = []
    unreadable: dict[str, str] = {}
    found = parts.gpu_nodes(nodes, catalog, unreadable, warnings)
    if tier_keys:
        levels = Levels(up_keys=tier_keys, source=HYPERNODES)
    else:
        levels = choose_levels([n.metadata.labels for n, _, _ in found], topologies, catalog)
    platforms = tuple(sorted({p for _, p, _ in found}, key=catalog.index))
    fabric: list[str] = []
    members = parts.domains_of(found, platforms, levels, fabric)
    warnings.extend(fabric)
    layout = parts.NodeLayout.of(members, platforms, health, warnings)
    group, group_ids = parts.groups_above(levels, layout.node_labels, layout.node_start)
    taint_class, taint_classes = parts.taint_classes(layout.node_taints)
    gpus = np.asarray(layout.node_gpus, dtype=np.int32)
    unreadable_pods: dict[str, str] = {}
    used = parts.booked(pods, layout, platforms, gpus, unreadable_pods, warnings)
    bitmap = domains.FleetBitmap(
        np.asarray(layout.node_domain, dtype=np.int32),
        gpus,
        used.astype(np.int32),
        np.asarray(layout.node_usable, dtype=np.uint8),
        np.asarray(layout.node_start, dtype=np.int32),
        np.asarray(layout.tray_bits, dtype=np.int32),
        np.asarray(layout.dom_platform, dtype=np.int16),
        np.asarray(layout.dom_flags, dtype=np.uint8),
        group,
    )
    return Fleet(
        bitmap=bitmap,
        catalog=catalog,
        levels=levels,
        platforms=platforms,
        node_names=layout.node_names,
        node_index=layout.node_index,
        name_index=names.NameIndex(layout.node_names),
        node_labels=layout.node_labels,
        node_taint_class=taint_class,
        taint_classes=taint_classes,
        domain_ids=layout.domain_ids,
        group_ids=group_ids,
        node_domain=bitmap.node_domains,
        domain_group=bitmap.domain_groups,
        warnings=warnings,
        unreadable_nodes=dict(sorted(unreadable.items())),
        unreadable_pods=dict(sorted(unreadable_pods.items())),
        fabric=fabric,
        unusable=dict(sorted(layout.unusable.items())),
    )

"""Volcano HyperNodes as topology levels: each tier becomes a node label the planner already understands.

The planner groups domains by node labels (``labels.py``). A HyperNode tree
says the same thing another way — tier 1 groups nodes, tier 2 groups tier-1
HyperNodes — so each node gets one synthetic label per tier,
``kilter.dev/hypernode-tier-<t>: <HyperNode name>``, and those labels become
the levels above the scale-up domain, finest first (the domain itself stays
the platform's own label, such as ``nvidia.com/gpu.clique``). Everything downstream
(plans, slices, required and preferred levels, explain) then works for
Volcano unchanged. A Kueue Topology, when the cluster has one, still wins:
HyperNodes are used only without it.

Members resolve as the Volcano scheduler resolves them: ``exactMatch`` by
name, ``regexMatch`` as an unanchored regular expression over node names,
``labelMatch`` as a label selector; a HyperNode member only by
``exactMatch``. A node reached by two HyperNodes of one tier keeps the
first by name; a member cycle is cut where it closes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import msgspec

from kilter.model.annotations import HYPERNODE_TIER_PREFIX
from kilter.model.core_v1 import Node
from kilter.model.volcano import HyperNode, LabelSelector

__all__ = ["SOURCE", "TIER_LABEL_PREFIX", "node_tiers", "selector_matches", "tier_label", "with_hypernode_labels"]

TIER_LABEL_PREFIX = HYPERNODE_TIER_PREFIX
SOURCE = "Volcano HyperNodes"


def tier_label(tier: int) -> str:
    return f"{TIER_LABEL_PREFIX}{tier}"


def selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """``metav1.LabelSelector`` semantics; an unknown operator matches nothing."""
    for key, value in selector.match_labels.items():
        if labels.get(key) != value:
            return False
    for req in selector.match_expressions:
        present = req.key in labels
        if req.operator == "In":
            ok = present and labels[req.key] in req.values
        elif req.operator == "NotIn":
            ok = not present or labels[req.key] not in req.values
        elif req.operator == "Exists":
            ok = present
        elif req.operator == "DoesNotExist":
            ok = not present
        else:
            ok = False
        if not ok:
            return False
    return True


def _node_members(hn: HyperNode, nodes: Sequence[Node]) -> set[str]:
    out: set[str] = set()
    for member in hn.spec.members:
        if member.type != "Node":
            continue
        sel = member.selector
        if sel.exact_match is not None:
            out.add(sel.exact_match.name)
        elif sel.regex_match is not None:
            try:
                pattern = re.compile(sel.regex_match.pattern)
            except re.error:
                continue
            out.update(n.metadata.name for n in nodes if pattern.search(n.metadata.name))
        elif sel.label_match is not None:
            out.update(n.metadata.name for n in nodes if selector_matches(sel.label_match, n.metadata.labels))
    return out


def node_tiers(hypernodes: Iterable[HyperNode], nodes: Sequence[Node]) -> dict[str, dict[int, str]]:
    """Per node name: tier -> the HyperNode of that tier it sits under."""
    by_name = {hn.metadata.name: hn for hn in sorted(hypernodes, key=lambda h: h.metadata.name)}
    direct = {name: _node_members(hn, nodes) for name, hn in by_name.items()}
    children = {
        name: [
            m.selector.exact_match.name
            for m in hn.spec.members
            if m.type == "HyperNode" and m.selector.exact_match is not None and m.selector.exact_match.name in by_name
        ]
        for name, hn in by_name.items()
    }
    known = {n.metadata.name for n in nodes}
    out: dict[str, dict[int, str]] = {}

    def descend(name: str, trail: tuple[str, ...]) -> set[str]:
        found = set(direct[name])
        for child in children[name]:
            if child not in trail:
                found |= descend(child, (*trail, child))
        return found

    for name, hn in by_name.items():
        for node in sorted(descend(name, (name,)) & known):
            out.setdefault(node, {}).setdefault(hn.spec.tier, name)
    return out


def with_hypernode_labels(nodes: Sequence[Node], hypernodes: Sequence[HyperNode]) -> tuple[list[Node], tuple[str, ...]]:
    """The nodes with their tier labels added, and those labels finest tier first (empty without HyperNodes)."""
    if not hypernodes:
        return list(nodes), ()
    tiers = node_tiers(hypernodes, nodes)
    if not tiers:
        return list(nodes), ()
    out: list[Node] = []
    for node in nodes:
        mine = tiers.get(node.metadata.name)
        if not mine:
            out.append(node)
            continue
        labels = {**node.metadata.labels, **{tier_label(t): hn for t, hn in mine.items()}}
        meta = msgspec.structs.replace(node.metadata, labels=labels)
        out.append(msgspec.structs.replace(node, metadata=meta))
    present = sorted({t for mine in tiers.values() for t in mine})
    return out, tuple(tier_label(t) for t in present)

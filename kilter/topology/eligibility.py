"""Which nodes a pod template may use: nodeSelector, required node affinity, tolerations.

Computed as one numpy mask per template over the fleet's label codes, so the
planner never sees a label. ``None`` means every node is eligible, which
keeps the common case (GPU pods with no selector) on the planner's fastest path.

A selector may name any number of keys: a ``nodeSelector`` key that no node
carries matches nothing, so the mask is empty at once; a requirement on such
a key is decided without touching the fleet's arrays, identical requirements
of a term are read once, and a term stops at its first requirement that
leaves no node. So a pod naming 100,000 keys costs set lookups, not 100,000
passes over the nodes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from kilter.model.core_v1 import NodeSelectorRequirement, PodSpec, Toleration
from kilter.model.errors import InputError
from kilter.topology.fleet import Fleet, TaintKey

__all__ = ["node_mask", "tolerates"]

Mask = npt.NDArray[np.bool_]


def tolerates(tolerations: Sequence[Toleration], taint: TaintKey) -> bool:
    """Kubernetes' ToleratesTaint: key (empty + Exists = all), effect (empty = all), value for Equal."""
    key, value, effect = taint
    for t in tolerations:
        if t.effect and t.effect != effect:
            continue
        if t.operator == "Exists":
            if not t.key or t.key == key:
                return True
        elif t.key == key and t.value == value:
            return True
    return False


def _label_in(fleet: Fleet, key: str, values: Sequence[str]) -> Mask:
    codes, table = fleet.label_codes(key)
    wanted = [table[v] for v in values if v in table]
    return np.isin(codes, np.asarray(wanted, dtype=np.int32)) if wanted else np.zeros(len(codes), dtype=bool)


def _requirement(fleet: Fleet, req: NodeSelectorRequirement, path: str) -> Mask | None:
    """The nodes meeting one matchExpressions requirement; None = every node (NotIn or DoesNotExist on a label key
    no node carries)."""
    op = req.operator
    if op in ("Gt", "Lt") and (len(req.values) != 1 or not req.values[0].lstrip("-").isdigit()):
        raise InputError(f"{op} needs exactly one integer value", path=path)
    if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
        raise InputError(f"unknown node selector operator {op!r}", path=path)
    if not fleet.has_label_key(req.key):
        return None if op in ("NotIn", "DoesNotExist") else np.zeros(fleet.n_nodes, dtype=bool)
    if op in ("In", "NotIn"):
        hit = _label_in(fleet, req.key, req.values)
        if op == "In":
            return hit
        codes, _ = fleet.label_codes(req.key)
        return ~hit | (codes < 0)
    if op in ("Exists", "DoesNotExist"):
        codes, _ = fleet.label_codes(req.key)
        return (codes >= 0) if op == "Exists" else (codes < 0)
    bound = int(req.values[0])  # Gt or Lt
    out = np.zeros(fleet.n_nodes, dtype=bool)
    for i, labels in enumerate(fleet.node_labels):
        v = labels.get(req.key)
        if v is not None and v.lstrip("-").isdigit():
            out[i] = int(v) > bound if op == "Gt" else int(v) < bound
    return out


def _field_requirement(fleet: Fleet, req: NodeSelectorRequirement, path: str) -> Mask:
    if req.key != "metadata.name" or req.operator not in ("In", "NotIn"):
        raise InputError("matchFields supports metadata.name with In/NotIn", path=path)
    hit = np.zeros(fleet.n_nodes, dtype=bool)
    for v in req.values:
        i = fleet.node_index.get(v)
        if i is not None:
            hit[i] = True
    return hit if req.operator == "In" else ~hit


def node_mask(fleet: Fleet, spec: PodSpec, *, path: str = "$.spec") -> Mask | None:
    """Nodes this pod spec may run on as far as labels and taints go; None = all of them."""
    mask: Mask | None = None

    def narrow(m: Mask) -> None:
        nonlocal mask
        mask = m if mask is None else (mask & m)

    if not all(fleet.has_label_key(key) for key in spec.node_selector):
        return np.zeros(fleet.n_nodes, dtype=bool)  # a key no node carries: no node matches
    for key, value in sorted(spec.node_selector.items()):
        narrow(_label_in(fleet, key, [value]))
    na = spec.affinity.node_affinity if spec.affinity else None
    required = na.required_during_scheduling_ignored_during_execution if na else None
    if required is not None:
        terms_mask = np.zeros(fleet.n_nodes, dtype=bool)
        base = f"{path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        for t, term in enumerate(required.node_selector_terms):
            term_mask = np.ones(fleet.n_nodes, dtype=bool)
            if not term.match_expressions and not term.match_fields:
                continue
            seen: set[tuple[str, str, tuple[str, ...]]] = set()
            for r, req in enumerate(term.match_expressions):
                what = (req.key, req.operator, tuple(req.values))
                if what in seen:
                    continue
                seen.add(what)
                met = _requirement(fleet, req, f"{base}[{t}].matchExpressions[{r}]")
                if met is not None:
                    term_mask &= met
                    if not term_mask.any():
                        break  # no node left for this term: its other requirements cannot add one
            for r, req in enumerate(term.match_fields):
                term_mask &= _field_requirement(fleet, req, f"{base}[{t}].matchFields[{r}]")
            terms_mask |= term_mask
        narrow(terms_mask)
    classes = fleet.taint_classes
    if len(classes) > 1:
        ok = np.array([all(tolerates(spec.tolerations, t) for t in taints) for taints in classes], dtype=bool)
        if not ok.all():
            narrow(ok[fleet.node_taint_class])
    return mask

"""Which nodes a pod template may use: nodeSelector, required node affinity, tolerations.

Computed as one numpy mask per template over the fleet's label codes, so the
planner never sees a label. ``None`` means every node is eligible, which
keeps the common case (GPU pods with no selector) on the planner's fastest path.

A selector may name any number of keys: a ``nodeSelector`` key that no node
carries matches nothing, so the mask is empty at once; a term's requirements
are merged per key and operator before any array is read (``_Term``), and a
requirement on a key no node carries is decided without one. So a pod
naming 100,000 keys costs set lookups, not 100,000 passes over the nodes.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np
import numpy.typing as npt

from kilter.model.core_v1 import NodeSelectorRequirement, PodSpec, Toleration
from kilter.model.errors import InputError
from kilter.topology.fleet import Fleet, TaintKey

__all__ = ["mask_key", "node_mask", "tolerates"]

Mask = npt.NDArray[np.bool_]

_KEY_ENCODER = msgspec.json.Encoder()


def mask_key(spec: PodSpec) -> bytes:
    """What ``node_mask`` reads of a spec, as bytes: the key a cache of masks keeps them by (pods of one
    Deployment or Job, each its own object, share it)."""
    return _KEY_ENCODER.encode((spec.node_selector, spec.affinity, spec.tolerations))


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


MAX_INT_DIGITS = (
    18  # Gt/Lt values are int64 (Kubernetes parses them with strconv.ParseInt); int() of 5,000 digits raises
)


def _integer(text: str) -> int | None:
    """A Gt/Lt value or node label as an integer, or None when it is none (too long to be an int64 included)."""
    digits = text[1:] if text.startswith("-") else text
    return int(text) if digits.isdigit() and len(digits) <= MAX_INT_DIGITS else None


class _Term:
    """One nodeSelectorTerm's matchExpressions, merged per key and operator (their AND): In keeps the values all
    its requirements allow, NotIn the union, Gt the highest bound, Lt the lowest. Built in one pass over the
    requirements, so the fleet's arrays are read once per key and operator, not once per requirement."""

    def __init__(self, reqs: Sequence[NodeSelectorRequirement], base: str) -> None:
        self.ins: dict[str, set[str]] = {}
        self.not_ins: dict[str, set[str]] = {}
        self.gts: dict[str, int] = {}
        self.lts: dict[str, int] = {}
        self.exists: set[str] = set()
        self.not_exists: set[str] = set()
        for r, req in enumerate(reqs):
            op, key = req.operator, req.key
            if op == "In":
                held = self.ins.get(key)
                self.ins[key] = set(req.values) if held is None else held & set(req.values)
            elif op == "NotIn":
                self.not_ins.setdefault(key, set()).update(req.values)
            elif op in ("Gt", "Lt"):
                bound = _integer(req.values[0]) if len(req.values) == 1 else None
                if bound is None:
                    raise InputError(f"{op} needs exactly one integer value", path=f"{base}[{r}]")
                bounds = self.gts if op == "Gt" else self.lts
                bounds[key] = bound if key not in bounds else (max if op == "Gt" else min)(bounds[key], bound)
            elif op == "Exists":
                self.exists.add(key)
            elif op == "DoesNotExist":
                self.not_exists.add(key)
            else:
                raise InputError(f"unknown node selector operator {op!r}", path=f"{base}[{r}]")

    def mask(self, fleet: Fleet) -> Mask:
        """The nodes meeting every requirement. A key no node carries decides without reading an array: In,
        Exists, Gt and Lt on it match no node, NotIn and DoesNotExist every node."""
        if any(not fleet.has_label_key(k) for k in (*self.ins, *self.exists, *self.gts, *self.lts)):
            return np.zeros(fleet.n_nodes, dtype=bool)
        out = np.ones(fleet.n_nodes, dtype=bool)
        for key in sorted(self.ins):
            out &= _label_in(fleet, key, sorted(self.ins[key]))
        for key in sorted(self.exists):
            out &= fleet.label_codes(key)[0] >= 0
        for key in sorted(k for k in self.not_ins if fleet.has_label_key(k)):
            codes, _ = fleet.label_codes(key)
            out &= ~_label_in(fleet, key, sorted(self.not_ins[key])) | (codes < 0)
        for key in sorted(k for k in self.not_exists if fleet.has_label_key(k)):
            out &= fleet.label_codes(key)[0] < 0
        for op, bounds in (("Gt", self.gts), ("Lt", self.lts)):
            for key, bound in sorted(bounds.items()):
                out &= _compare(fleet, key, bound, greater=op == "Gt")
        return out


def _compare(fleet: Fleet, key: str, bound: int, *, greater: bool) -> Mask:
    """Nodes whose label ``key`` is an integer above (``greater``) or below ``bound``; once per distinct value."""
    codes, table = fleet.label_codes(key)
    by_code = np.zeros(len(table) + 1, dtype=bool)  # the last slot, read by code -1: the label is absent
    for value, code in table.items():
        number = _integer(value)
        by_code[code] = number is not None and (number > bound if greater else number < bound)
    return by_code[codes]


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
            if not term.match_expressions and not term.match_fields:
                continue
            term_mask = _Term(term.match_expressions, f"{base}[{t}].matchExpressions").mask(fleet)
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

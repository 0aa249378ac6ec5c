"""The cohort tree of ClusterQueues and Cohorts, with Kueue's quota bookkeeping.

Mirrors ``pkg/cache/scheduler/resource_node.go``: every node has ``quotas``
(nominal, borrowing and lending limit per flavor/resource), ``subtree``
(SubtreeQuota: a ClusterQueue's nominal; a Cohort's own nominal plus what
each child lends, i.e. child subtree minus child localQuota) and ``usage``
(a ClusterQueue's admitted usage; a Cohort's sum of the children's usage above
their localQuota). A cohort named by a ClusterQueue or a ``parentName`` but
absent from the cluster is an implicit empty cohort; cohorts on a cycle, and
everything under them, are inactive, as Kueue disables them: a ClusterQueue
under a cycle gets Kueue's ``Active: False`` reason ``CohortCycleDetected``
and its message (``inactive_reason``, ``inactive_message``), and admits
nothing until the cycle is cut.

Objects that Kueue's webhooks would reject are reported as problems (with
field paths) and their node is inactive rather than silently used.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from typing import Literal

from kilter.model import quantity
from kilter.model.core_v1 import Quantity
from kilter.model.errors import ConfigError, InputError
from kilter.model.kueue import ClusterQueue, ClusterQueuePreemption, Cohort, ResourceGroup
from kilter.quota import amount
from kilter.quota.policy import Policy, parse_policy

__all__ = ["COHORT_CYCLE", "FR", "INVALID_SPEC", "Problem", "Quota", "QuotaNode", "QuotaTree", "build_tree"]

FR = tuple[str, str]  # (flavor, resource)
COHORT_CYCLE = "CohortCycleDetected"  # Kueue's ClusterQueueActiveReasonCohortCycleDetected
INVALID_SPEC = "InvalidSpec"  # kilter's own: a spec Kueue's webhooks would have refused


@dataclass(frozen=True)
class Quota:
    """Nominal quota and optional limits of one flavor/resource; None = no limit."""

    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True)
class Problem:
    kind: str
    name: str
    path: str
    message: str
    cycle: bool = False  # a cohort cycle: Kueue accepts the objects and reports them inactive, not invalid

    def __str__(self) -> str:
        return f"{self.kind} {self.name}: {self.message} (at {self.path})"


@dataclass(eq=False)
class QuotaNode:
    """A ClusterQueue or a Cohort in the tree."""

    name: str
    kind: Literal["ClusterQueue", "Cohort"]
    quotas: dict[FR, Quota] = field(default_factory=dict)
    weight: float = 1.0
    policy: Policy = field(default_factory=Policy)
    preemption: ClusterQueuePreemption | None = None
    explicit: bool = True
    active: bool = True
    inactive_reason: str = ""  # why not active, as Kueue's ClusterQueue Active condition's reason says it
    inactive_message: str = ""
    groups: list[tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=list)
    admission_mode: str = ""
    parent_name: str = ""
    parent: QuotaNode | None = None
    child_cohorts: list[QuotaNode] = field(default_factory=list)  # by name
    child_cqs: list[QuotaNode] = field(default_factory=list)  # by name
    subtree: dict[FR, int] = field(default_factory=dict)
    local: dict[FR, int] = field(default_factory=dict)  # localQuota where a lending limit sets one
    usage: dict[FR, int] = field(default_factory=dict)

    @property
    def is_cohort(self) -> bool:
        return self.kind == "Cohort"

    @property
    def children(self) -> list[QuotaNode]:
        return [*self.child_cohorts, *self.child_cqs]

    def local_quota(self, fr: FR) -> int:
        """The part of the subtree quota that a lending limit keeps from the parent (kept by ``recompute``)."""
        return self.local.get(fr, 0)

    def ancestors(self) -> Iterator[QuotaNode]:
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def min_runtime(self) -> float | None:
        """The ``kilter.dev/min-runtime`` guard that reaches this node: its own, else its nearest ancestor's."""
        for n in (self, *self.ancestors()):
            if n.policy.min_runtime_s is not None:
                return n.policy.min_runtime_s
        return None

    def root(self) -> QuotaNode:
        node = self
        while node.parent is not None:
            node = node.parent
        return node


@dataclass
class QuotaTree:
    cluster_queues: dict[str, QuotaNode]
    cohorts: dict[str, QuotaNode]
    problems: list[Problem] = field(default_factory=list)
    _nodes_under: dict[int, tuple[list[QuotaNode], list[QuotaNode]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def cohorts_under(self, root: QuotaNode) -> list[QuotaNode]:
        """The cohorts of ``root``'s tree, children first; kept, as the tree's shape never changes."""
        return self._under(root)[0]

    def cluster_queues_under(self, root: QuotaNode) -> list[QuotaNode]:
        """The ClusterQueues of ``root``'s tree, in the same order; kept likewise."""
        return self._under(root)[1]

    def _under(self, root: QuotaNode) -> tuple[list[QuotaNode], list[QuotaNode]]:
        cached = self._nodes_under.get(id(root))
        if cached is None:
            nodes = self.post_order(root)
            cached = [n for n in nodes if n.is_cohort], [n for n in nodes if not n.is_cohort]
            self._nodes_under[id(root)] = cached
        return cached

    @cached_property
    def decaying(self) -> list[QuotaNode]:
        """Nodes with ``kilter.dev/usage-half-life``: the only ones whose share needs a decay state."""
        return [n for n in [*self.cluster_queues.values(), *self.cohorts.values()] if n.policy.half_life_s]

    @property
    def roots(self) -> list[QuotaNode]:
        """Top-level cohorts and cohort-less ClusterQueues, by name."""
        tops = [c for c in self.cohorts.values() if c.parent is None and c.active]
        tops += [q for q in self.cluster_queues.values() if q.parent is None and q.active]
        return sorted(tops, key=lambda n: (n.kind, n.name))

    def raise_problems(self, *, cycles: bool = True) -> None:
        """A ConfigError naming the first problem; with ``cycles`` False, cohort cycles are no problem to raise
        (Kueue accepts them and marks what is under them inactive)."""
        problems = [p for p in self.problems if cycles or not p.cycle]
        if problems:
            first = str(problems[0])
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ConfigError(first + more)

    def inactive_cluster_queues(self) -> list[QuotaNode]:
        """The ClusterQueues that admit nothing (their spec is invalid, or a cohort above them is), by name."""
        return [self.cluster_queues[n] for n in sorted(self.cluster_queues) if not self.cluster_queues[n].active]

    def post_order(self, root: QuotaNode) -> list[QuotaNode]:
        """Every node under ``root``, children before parents (an explicit stack, no recursion)."""
        out: list[QuotaNode] = []
        stack: list[tuple[QuotaNode, bool]] = [(root, False)]
        while stack:
            node, done = stack.pop()
            if done:
                out.append(node)
                continue
            stack.append((node, True))
            for child in reversed(node.children):
                stack.append((child, False))
        return out

    def recompute(self) -> None:
        """SubtreeQuota and cohort usage from the quotas and the ClusterQueues' usage (Kueue's
        ``updateCohortResourceNode``/``accumulateFromChild``), for every tree."""
        for root in self.roots:
            self.recompute_under(root)

    def recompute_under(self, root: QuotaNode) -> None:
        """``recompute`` for the one tree under ``root``."""
        for node in self.post_order(root):
            node.subtree = {fr: q.nominal for fr, q in node.quotas.items()}
            if node.is_cohort:
                node.usage = {}
                for child in node.children:
                    for fr, sub in child.subtree.items():
                        node.subtree[fr] = amount.add(node.subtree.get(fr, 0), amount.sub(sub, child.local_quota(fr)))
                    for fr, used in child.usage.items():
                        node.usage[fr] = node.usage.get(fr, 0) + max(0, used - child.local_quota(fr))
            node.local = {
                fr: max(0, amount.sub(node.subtree.get(fr, 0), q.lending_limit))
                for fr, q in node.quotas.items()
                if q.lending_limit is not None
            }


# ---------------------------------------------------------------- building


def _weight(raw: Quantity | None, problems: list[Problem], kind: str, name: str, path: str) -> float:
    if raw is None:
        return 1.0
    try:
        w = quantity.parse_quantity(raw, path=path)
    except InputError as exc:
        problems.append(Problem(kind, name, path, exc.message))
        return 1.0
    if w < 0 or (0 < w <= Decimal("1e-9")):
        problems.append(Problem(kind, name, path, f"fairSharing.weight {raw} must be 0 or greater than 1e-9"))
        return 1.0
    return float(w)


def _quotas(
    groups: list[ResourceGroup], *, kind: str, name: str, has_parent: bool, problems: list[Problem]
) -> dict[FR, Quota]:
    """Quotas of a spec's resource groups, checked as Kueue's webhooks check them."""
    out: dict[FR, Quota] = {}
    seen_resources: set[str] = set()
    seen_flavors: set[str] = set()
    for g, group in enumerate(groups):
        gpath = f"$.spec.resourceGroups[{g}]"
        if not group.covered_resources or not group.flavors:
            problems.append(Problem(kind, name, gpath, "a resource group needs coveredResources and flavors"))
        for r in group.covered_resources:
            if r in seen_resources:
                problems.append(Problem(kind, name, gpath, f"resource {r} is covered by more than one group"))
            seen_resources.add(r)
        for f, flavor in enumerate(group.flavors):
            fpath = f"{gpath}.flavors[{f}]"
            if flavor.name in seen_flavors:
                problems.append(Problem(kind, name, fpath, f"flavor {flavor.name} appears more than once"))
            seen_flavors.add(flavor.name)
            names = [r.name for r in flavor.resources]
            if names != list(group.covered_resources):
                problems.append(
                    Problem(
                        kind, name, f"{fpath}.resources", "must list exactly the group's coveredResources, in order"
                    )
                )
            for i, rq in enumerate(flavor.resources):
                rpath = f"{fpath}.resources[{i}]"
                try:
                    nominal = amount.from_quantity(rq.name, rq.nominal_quota, path=f"{rpath}.nominalQuota")
                    bl = (
                        None
                        if rq.borrowing_limit is None
                        else amount.from_quantity(rq.name, rq.borrowing_limit, path=f"{rpath}.borrowingLimit")
                    )
                    ll = (
                        None
                        if rq.lending_limit is None
                        else amount.from_quantity(rq.name, rq.lending_limit, path=f"{rpath}.lendingLimit")
                    )
                except InputError as exc:
                    problems.append(Problem(kind, name, exc.path, exc.message))
                    continue
                for label, value in (("nominalQuota", nominal), ("borrowingLimit", bl), ("lendingLimit", ll)):
                    if value is not None and value < 0:
                        problems.append(Problem(kind, name, f"{rpath}.{label}", f"{label} must be >= 0"))
                if (bl is not None or ll is not None) and not has_parent:
                    where = "a cohort" if kind == "ClusterQueue" else "a parent"
                    problems.append(
                        Problem(
                            kind, name, rpath, f"borrowingLimit and lendingLimit need {where} to borrow from or lend to"
                        )
                    )
                if kind == "ClusterQueue" and ll is not None and ll > nominal:
                    problems.append(
                        Problem(
                            kind,
                            name,
                            f"{rpath}.lendingLimit",
                            f"lendingLimit exceeds nominalQuota of {flavor.name}/{rq.name}",
                        )
                    )
                out[(flavor.name, rq.name)] = Quota(nominal, bl, ll)
    return out


def _node(
    kind: Literal["ClusterQueue", "Cohort"],
    obj: ClusterQueue | Cohort,
    parent_name: str,
    problems: list[Problem],
) -> QuotaNode:
    """A node with its weight, quotas and policy; any problem found leaves it inactive."""
    name = obj.metadata.name
    n_before = len(problems)
    fair = obj.spec.fair_sharing
    node = QuotaNode(
        name=name,
        kind=kind,
        parent_name=parent_name,
        weight=_weight(fair.weight if fair else None, problems, kind, name, "$.spec.fairSharing.weight"),
    )
    node.quotas = _quotas(
        obj.spec.resource_groups, kind=kind, name=name, has_parent=bool(parent_name), problems=problems
    )
    try:
        node.policy = parse_policy(obj.metadata.annotations, path="$")
    except InputError as exc:
        problems.append(Problem(kind, name, exc.path, exc.message))
    if len(problems) > n_before:
        node.active = False
        node.inactive_reason = INVALID_SPEC
        node.inactive_message = f"Can't admit new workloads: {problems[n_before].message}"
    return node


def build_tree(cluster_queues: Iterable[ClusterQueue], cohorts: Iterable[Cohort]) -> QuotaTree:
    """The tree these objects describe, with problems reported instead of raised."""
    problems: list[Problem] = []
    cos = {co.metadata.name: _node("Cohort", co, co.spec.parent_cohort, problems) for co in cohorts}
    cqs: dict[str, QuotaNode] = {}
    for cq in cluster_queues:
        node = _node("ClusterQueue", cq, cq.spec.parent, problems)
        node.preemption = cq.spec.preemption
        node.groups = [(tuple(g.covered_resources), tuple(f.name for f in g.flavors)) for g in cq.spec.resource_groups]
        node.admission_mode = cq.spec.admission_scope.admission_mode if cq.spec.admission_scope else ""
        cqs[cq.metadata.name] = node

    for node in [*cos.values(), *cqs.values()]:
        if node.parent_name and node.parent_name not in cos:
            cos[node.parent_name] = QuotaNode(name=node.parent_name, kind="Cohort", explicit=False)

    for co_node in sorted(cos.values(), key=lambda n: n.name):
        if co_node.parent_name:
            co_node.parent = cos[co_node.parent_name]
            co_node.parent.child_cohorts.append(co_node)
    for cq_node in sorted(cqs.values(), key=lambda n: n.name):
        if cq_node.parent_name:
            cq_node.parent = cos[cq_node.parent_name]
            cq_node.parent.child_cqs.append(cq_node)

    _disable_cycles(cos, problems)
    tree = QuotaTree(cqs, cos, problems)
    _disable_below_inactive(tree)
    tree.recompute()
    return tree


def _disable_cycles(cos: dict[str, QuotaNode], problems: list[Problem]) -> None:
    """Mark cohorts on a parent cycle (and their subtrees) inactive, as Kueue does; cut the cycle."""
    state: dict[str, int] = {}
    for start in sorted(cos):
        chain: list[QuotaNode] = []
        node: QuotaNode | None = cos[start]
        while node is not None and state.get(node.name, 0) == 0:
            state[node.name] = 1
            chain.append(node)
            node = node.parent
        if node is not None and state.get(node.name) == 1:
            cycle = chain[chain.index(node) :]
            names = " -> ".join(n.name for n in [*cycle, node])
            for member in cycle:
                member.active = False
                member.inactive_reason = COHORT_CYCLE
                member.inactive_message = _cycle_message(member.name)
                problems.append(
                    Problem("Cohort", member.name, "$.spec.parentName", f"cohort cycle {names}", cycle=True)
                )
            cycle[-1].parent.child_cohorts.remove(cycle[-1])  # type: ignore[union-attr]
            cycle[-1].parent = None
        for n in chain:
            state[n.name] = 2


def _cycle_message(cohort: str) -> str:
    """Kueue's message on a ClusterQueue whose cohort's hierarchy has a cycle (its Active condition)."""
    return f'Can\'t admit new workloads: Cohort "{cohort}" has a cycle in hierarchy.'


def _disable_below_inactive(tree: QuotaTree) -> None:
    """Everything under an inactive cohort is inactive, with the reason of the nearest inactive one above it
    (Kueue's message names the node's own cohort: it "has a cycle in hierarchy")."""
    for node in [*tree.cohorts.values(), *tree.cluster_queues.values()]:
        above = next((a for a in node.ancestors() if not a.active), None)
        if node.active and above is not None:
            node.active = False
            node.inactive_reason = above.inactive_reason
            if above.inactive_reason == COHORT_CYCLE:
                node.inactive_message = _cycle_message(node.parent_name)
            else:
                node.inactive_message = f"Can't admit new workloads: {above.kind} {above.name} is inactive"

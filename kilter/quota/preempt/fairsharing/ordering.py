"""The order fair-sharing preemption visits target ClusterQueues in: a tournament down the highest share.

Mirrors Kueue's ``TargetClusterQueueOrdering`` in
``pkg/scheduler/preemption/fairsharing/ordering.go``: from the root cohort,
repeatedly descend to the child with the highest dominant resource share
(ties between queues go to the better head candidate), pruning queues with no
candidates left and queues and cohorts that no longer borrow. The preemptor's
own queue and its ancestors are never pruned for not borrowing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import cmp_to_key

from kilter.quota.drs import DRS, compare
from kilter.quota.shares import Shares
from kilter.quota.tree import QuotaNode
from kilter.quota.usage import WorkloadInfo

__all__ = ["Ordering"]


class Ordering:
    """``TargetClusterQueueOrdering``: from the root, repeatedly descend to the highest share.

    Each queue's candidates are sorted only when that queue is first looked
    at; restricted to one queue, ``CandidatesOrdering`` is the same order.
    """

    def __init__(
        self,
        preemptor_cq: QuotaNode,
        root: QuotaNode,
        by_cq: Mapping[str, list[WorkloadInfo]],
        shares: Shares,
        order: Callable[[WorkloadInfo, WorkloadInfo], int],
    ) -> None:
        self.preemptor = preemptor_cq
        self.root = root
        self.ancestors = {id(a) for a in preemptor_cq.ancestors()}
        self.by_cq = {name: list(ws) for name, ws in by_cq.items() if ws}
        self.sorted: set[str] = set()
        self.pos: dict[str, int] = {}
        self.pruned: set[int] = set()
        self.shares = shares
        self.cmp = order
        self._drs: dict[int, DRS] = {}

    def share(self, node: QuotaNode) -> DRS:
        """A node's share, kept until the next preemption changes usage (``changed``)."""
        drs = self._drs.get(id(node))
        if drs is None:
            drs = self._drs[id(node)] = self.shares.of(node)
        return drs

    def changed(self, cq: QuotaNode) -> None:
        """Usage moved in ``cq``: only it and its ancestors can have new shares."""
        for node in (cq, *cq.ancestors()):
            self._drs.pop(id(node), None)

    def _list(self, name: str) -> list[WorkloadInfo]:
        ws = self.by_cq[name]
        if name not in self.sorted:
            ws.sort(key=cmp_to_key(self.cmp))
            self.sorted.add(name)
        return ws

    def has(self, cq: QuotaNode) -> bool:
        return cq.name in self.by_cq and self.pos.get(cq.name, 0) < len(self.by_cq[cq.name])

    def head(self, cq: QuotaNode) -> WorkloadInfo:
        return self._list(cq.name)[self.pos.get(cq.name, 0)]

    def pop(self, cq: QuotaNode) -> WorkloadInfo:
        w = self.head(cq)
        self.pos[cq.name] = self.pos.get(cq.name, 0) + 1
        return w

    def drop(self, cq: QuotaNode) -> None:
        self.pruned.add(id(cq))

    def targets(self) -> Iterator[QuotaNode]:
        if self.root is self.preemptor:
            while self.has(self.preemptor):
                yield self.preemptor
            return
        while id(self.root) not in self.pruned:
            t = self._next(self.root)
            if t is not None:
                yield t

    def _next(self, cohort: QuotaNode) -> QuotaNode | None:
        best_cq: tuple[QuotaNode, DRS] | None = None
        for cq in cohort.child_cqs:
            if id(cq) in self.pruned:
                continue
            if not self.has(cq):
                self.pruned.add(id(cq))
                continue
            drs = self.share(cq)
            if not drs.borrowing and cq is not self.preemptor:
                self.pruned.add(id(cq))
                continue
            if best_cq is None:
                best_cq = (cq, drs)
                continue
            c = compare(drs, best_cq[1])
            if c > 0 or (c == 0 and self.cmp(self.head(cq), self.head(best_cq[0])) < 0):
                best_cq = (cq, drs)
        best_co: tuple[QuotaNode, DRS] | None = None
        for co in cohort.child_cohorts:
            if id(co) in self.pruned:
                continue
            drs = self.share(co)
            if not drs.borrowing and id(co) not in self.ancestors:
                self.pruned.add(id(co))
                continue
            if best_co is None or compare(drs, best_co[1]) > 0:
                best_co = (co, drs)
        if best_cq is None and best_co is None:
            self.pruned.add(id(cohort))
            return None
        if best_co is not None and (best_cq is None or compare(best_co[1], best_cq[1]) >= 0):
            return self._next(best_co[0])
        assert best_cq is not None
        return best_cq[0]

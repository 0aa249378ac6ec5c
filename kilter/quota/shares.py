"""Shares as decisions see them: Kueue's DRS, with kilter's decayed usage where a node asks for it.

Decay states are advanced once, to ``now``, when the ``Shares`` is made; after
that every what-if (a workload added or removed) changes current usage, and
the share uses ``max(current, decayed)`` per flavor/resource. Nodes without
``kilter.dev/usage-half-life`` get exactly Kueue's share.
"""

from __future__ import annotations

from collections.abc import Mapping

from kilter.quota import decay
from kilter.quota.drs import DRS, LendableCache, dominant_resource_share
from kilter.quota.policy import DecayState
from kilter.quota.tree import FR, QuotaNode, QuotaTree

__all__ = ["Shares"]


class Shares:
    def __init__(self, tree: QuotaTree, *, now: float) -> None:
        self.lendable = LendableCache()
        self.states: dict[int, DecayState] = {}
        for node in tree.decaying:
            assert node.policy.half_life_s is not None
            self.states[id(node)] = decay.advance(
                node.policy.decay, node.usage, now=now, half_life_s=node.policy.half_life_s
            )

    def of(self, node: QuotaNode, request: Mapping[FR, int] | None = None) -> DRS:
        state = self.states.get(id(node))
        usage = decay.effective_usage(node.usage, state) if state is not None else None
        return dominant_resource_share(node, request, lendable=self.lendable, usage=usage)

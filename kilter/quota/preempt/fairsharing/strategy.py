"""The KEP-1714 fair-sharing preemption strategies, as named predicates over dominant resource shares.

Mirrors Kueue's ``pkg/scheduler/preemption/fairsharing/strategy.go``. The
shares compared are the preemptor side's share with the incoming workload
admitted (``preemptor_new``) and the target side's share before (``target_old``)
and after (``target_new``) removing one candidate; each side is the child of the
lowest common ancestor on its path. ``compare`` is the shares' three-way order.
"""

from __future__ import annotations

from kilter.quota.config import LESS_THAN_INITIAL_SHARE
from kilter.quota.drs import DRS, compare

__all__ = [
    "is_satisfied",
    "is_unsatisfiable",
    "less_than_initial_share",
    "less_than_or_equal_to_final_share",
]


def less_than_or_equal_to_final_share(preemptor_new: DRS, target_new: DRS) -> bool:
    """Rule S2-a (``LessThanOrEqualToFinalShare``): the preemptor ends no higher than the target ends."""
    return compare(preemptor_new, target_new) <= 0


def less_than_initial_share(preemptor_new: DRS, target_old: DRS) -> bool:
    """Rule S2-b (``LessThanInitialShare``): the preemptor ends below where the target started."""
    return compare(preemptor_new, target_old) < 0


def is_satisfied(name: str, preemptor_new: DRS, target_old: DRS, target_new: DRS) -> bool:
    """Whether the strategy called ``name`` lets the preemptor take the candidate (any other name is S2-a)."""
    if name == LESS_THAN_INITIAL_SHARE:
        return less_than_initial_share(preemptor_new, target_old)
    return less_than_or_equal_to_final_share(preemptor_new, target_new)


def is_unsatisfiable(name: str, preemptor_new: DRS, target_old: DRS) -> bool:
    """No candidate of the queue can pass (``fsStrategyUnsatisfiable``): removal never raises the target's share."""
    c = compare(preemptor_new, target_old)
    return c >= 0 if name == LESS_THAN_INITIAL_SHARE else c > 0

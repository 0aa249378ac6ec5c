"""Fair-sharing preemption (KEP-1714), cut as Kueue's ``pkg/scheduler/preemption/fairsharing/`` is.

``ordering`` visits target ClusterQueues from the root cohort down the highest
share (``TargetClusterQueueOrdering``); ``strategy`` holds the rules S2-a
``LessThanOrEqualToFinalShare`` and S2-b ``LessThanInitialShare``; ``target``
takes workloads from the queues the ordering yields while the strategy allows.
"""

from kilter.quota.preempt.fairsharing import ordering, strategy, target
from kilter.quota.preempt.fairsharing.ordering import Ordering
from kilter.quota.preempt.fairsharing.strategy import less_than_initial_share, less_than_or_equal_to_final_share
from kilter.quota.preempt.fairsharing.target import fair_targets

__all__ = [
    "Ordering",
    "fair_targets",
    "less_than_initial_share",
    "less_than_or_equal_to_final_share",
    "ordering",
    "strategy",
    "target",
]

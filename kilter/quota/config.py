"""Switches that select which Kueue behaviour the quota engine reproduces.

Defaults follow current Kueue (v0.17+): fair sharing on with both preemption
strategies, ``FairSharingPrioritizeNonBorrowing`` and
``FairSharingPreemptWithinNominal`` on, ``PrioritySortingWithinCohort`` on.
Older clusters are matched by turning the gates off.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LESS_THAN_INITIAL_SHARE", "LESS_THAN_OR_EQUAL_TO_FINAL_SHARE", "FairSharingConfig"]

LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"
STRATEGY_CHOICES = (
    (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,),
    (LESS_THAN_INITIAL_SHARE,),
    (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE),
)


@dataclass(frozen=True)
class FairSharingConfig:
    enabled: bool = True
    strategies: tuple[str, ...] = (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE)
    prioritize_non_borrowing: bool = True
    preempt_within_nominal: bool = True
    priority_sorting_within_cohort: bool = True

    def __post_init__(self) -> None:
        if self.strategies not in STRATEGY_CHOICES:
            raise ValueError(f"preemption strategies must be one of {STRATEGY_CHOICES}")

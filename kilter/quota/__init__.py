"""Quota: Kueue-exact cohort borrowing and dominant-resource fair share, plus decayed usage."""

from kilter.quota import (
    admit,
    amount,
    available,
    bound_jobs,
    bound_queues,
    config,
    decay,
    drs,
    policy,
    preempt,
    runtimes,
    shares,
    status,
    tree,
    usage,
    whatif,
)
from kilter.quota.admit import AdmissionDecision, admission_order, assign_flavors
from kilter.quota.bound_jobs import BoundJob
from kilter.quota.bound_queues import BoundQueues
from kilter.quota.config import FairSharingConfig
from kilter.quota.drs import DRS, LendableCache, compare, dominant_resource_share
from kilter.quota.preempt import PreemptionTargets, Target, find_targets
from kilter.quota.shares import Shares
from kilter.quota.status import QuotaNodeStatus, ResourceStatus, apply_usage, tree_status
from kilter.quota.tree import FR, Problem, Quota, QuotaNode, QuotaTree, build_tree
from kilter.quota.usage import Ledger, WorkloadInfo, workload_infos

__all__ = [
    "DRS",
    "FR",
    "AdmissionDecision",
    "BoundJob",
    "BoundQueues",
    "FairSharingConfig",
    "Ledger",
    "LendableCache",
    "PreemptionTargets",
    "Problem",
    "Quota",
    "QuotaNode",
    "QuotaNodeStatus",
    "QuotaTree",
    "ResourceStatus",
    "Shares",
    "Target",
    "WorkloadInfo",
    "admission_order",
    "admit",
    "afs",
    "amount",
    "apply_usage",
    "assign_flavors",
    "available",
    "bound_jobs",
    "bound_queues",
    "build_tree",
    "compare",
    "config",
    "decay",
    "dominant_resource_share",
    "drs",
    "find_targets",
    "policy",
    "preempt",
    "runtimes",
    "shares",
    "status",
    "tree",
    "tree_status",
    "usage",
    "whatif",
    "workload_infos",
]

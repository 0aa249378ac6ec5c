"""Quota: Kueue-exact cohort borrowing and dominant-resource fair share, plus decayed usage."""

from kilter.quota import amount, available, decay, drs, policy, status, tree, usage
from kilter.quota.drs import DRS, LendableCache, compare, dominant_resource_share
from kilter.quota.status import NodeStatus, ResourceStatus, apply_usage, tree_status
from kilter.quota.tree import FR, Node, Problem, Quota, QuotaTree, build_tree
from kilter.quota.usage import Ledger, WorkloadInfo, workload_infos

__all__ = [
    "DRS",
    "FR",
    "Ledger",
    "LendableCache",
    "Node",
    "NodeStatus",
    "Problem",
    "Quota",
    "QuotaTree",
    "ResourceStatus",
    "WorkloadInfo",
    "amount",
    "apply_usage",
    "available",
    "build_tree",
    "compare",
    "decay",
    "dominant_resource_share",
    "drs",
    "policy",
    "status",
    "tree",
    "tree_status",
    "usage",
    "workload_infos",
]

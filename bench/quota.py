"""Quota engine at scale: 1,000 ClusterQueues under three cohort levels, 100,000 admitted workloads.

Targets (issue #3): recomputing every share <= 50 ms; one admission decision
(order + fit + preemption targets) <= 1 ms. Decisions are timed for every
queue with an 8- and a 72-GPU gang, and the slowest of each outcome again on
its own.
"""

from __future__ import annotations

import random
import time
from functools import partial
from typing import Any

from bench.common import measure, write
from kilter.model import codec
from kilter.model.kueue import ClusterQueue, Cohort
from kilter.quota.admit import admission_order, by_cluster_queue
from kilter.quota.available import add_usage, available
from kilter.quota.config import FairSharingConfig
from kilter.quota.shares import Shares
from kilter.quota.status import apply_usage, tree_status
from kilter.quota.tree import QuotaTree, build_tree
from kilter.quota.usage import Ledger, WorkloadInfo

GPU = "nvidia.com/gpu"
FLAVORS = ("gb200", "h100")
NOW = 1_764_590_400.0


def _quota(name: str, nominal: int | str) -> dict[str, Any]:
    return {"name": name, "nominalQuota": str(nominal)}


def objects(rng: random.Random) -> tuple[list[ClusterQueue], list[Cohort]]:
    cohorts: list[dict[str, Any]] = [{"metadata": {"name": "org"}, "spec": {}}]
    cqs = []
    for d in range(10):
        cohorts.append(
            {"metadata": {"name": f"div-{d}"}, "spec": {"parentName": "org", "fairSharing": {"weight": str(1 + d % 3)}}}
        )
        for t in range(10):
            team = f"team-{d}-{t}"
            cohorts.append({"metadata": {"name": team}, "spec": {"parentName": f"div-{d}"}})
            for q in range(10):
                gpus = rng.choice((32, 64, 72, 144))
                res = [_quota("cpu", gpus * 18), _quota("memory", f"{gpus * 120}Gi"), _quota(GPU, gpus)]
                if q % 4 == 0:
                    res[2]["lendingLimit"] = str(gpus // 2)
                if q % 5 == 0:
                    res[2]["borrowingLimit"] = str(gpus)
                cqs.append(
                    {
                        "metadata": {"name": f"cq-{d}-{t}-{q}"},
                        "spec": {
                            "cohortName": team,
                            "fairSharing": {"weight": rng.choice(("1", "2", "0.5"))},
                            "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
                            "resourceGroups": [
                                {
                                    "coveredResources": ["cpu", "memory", GPU],
                                    "flavors": [{"name": f, "resources": res} for f in FLAVORS],
                                }
                            ],
                        },
                    }
                )
    return [codec.convert(c, ClusterQueue) for c in cqs], [codec.convert(c, Cohort) for c in cohorts]


def workloads(rng: random.Random, tree: QuotaTree, n: int) -> list[WorkloadInfo]:
    """n workloads admitted as Kueue would: each only if it fits ``available`` when it arrives.

    Queues are picked with a skew (some teams far busier than others), so many
    borrow idle quota and the cohorts end up close to full.
    """
    names = sorted(tree.cluster_queues)
    weights = [rng.paretovariate(1.2) for _ in names]
    out: list[WorkloadInfo] = []
    attempts = 0
    while len(out) < n and attempts < 4 * n:
        attempts += 1
        cq = rng.choices(names, weights)[0]
        node = tree.cluster_queues[cq]
        gpus = rng.choice((1, 1, 1, 2))
        for flavor in FLAVORS:
            usage = {(flavor, GPU): gpus, (flavor, "cpu"): gpus * 18_000, (flavor, "memory"): gpus * 120 * 2**30}
            if all(v <= available(node, fr) for fr, v in usage.items()):
                for fr, v in usage.items():
                    add_usage(node, fr, v)
                i = len(out)
                out.append(
                    WorkloadInfo(
                        "ns",
                        f"w{i}",
                        f"uid-{i:06d}",
                        cq,
                        "lq",
                        rng.choice((0, 100, 1000)),
                        NOW - rng.random() * 86400,
                        True,
                        NOW - rng.random() * 86400,
                        usage=usage,
                    )
                )
                break
    return out


def main() -> dict[str, Any]:
    rng = random.Random(11)
    cqs, cohorts = objects(rng)
    t0 = time.perf_counter()
    tree = build_tree(cqs, cohorts)
    build_s = time.perf_counter() - t0
    infos = workloads(rng, tree, 100_000)
    for node in tree.cluster_queues.values():
        node.usage = {}
    tree.recompute()
    t0 = time.perf_counter()
    ledger = Ledger(infos, sorted(tree.cluster_queues))
    ledger_s = time.perf_counter() - t0
    nodes = [*tree.cluster_queues.values(), *tree.cohorts.values()]

    def recompute_shares() -> None:
        apply_usage(tree, ledger.per_cluster_queue())
        shares = Shares(tree, now=NOW)
        for node in nodes:
            shares.of(node)

    results: dict[str, Any] = {
        "cluster_queues": len(tree.cluster_queues),
        "cohorts": len(tree.cohorts),
        "admitted_workloads": len(infos),
        "build_tree_s": round(build_s, 3),
        "build_ledger_s": round(ledger_s, 3),
        "recompute_all_shares": measure(recompute_shares, runs=30, warmup=2),
        "full_status_of_every_node": measure(partial(tree_status, tree, now=NOW), runs=10, warmup=1),
    }
    recompute_shares()
    admitted = by_cluster_queue(infos)
    config = FairSharingConfig()

    def incoming(cq: str, gpus: int, i: int = 0) -> WorkloadInfo:
        return WorkloadInfo(
            "ns",
            f"incoming-{i}",
            f"uid-incoming-{i}",
            cq,
            "lq",
            100,
            NOW,
            False,
            requests={GPU: gpus, "cpu": gpus * 18_000, "memory": gpus * 120 * 2**30},
        )

    def decide(w: WorkloadInfo) -> list[Any]:
        return admission_order(tree, [w], admitted, config=config, now=NOW)

    # One decision for every queue: an 8-GPU gang (mostly fits or preempts) and a 72-GPU one (often
    # more than preemption could ever free), each timed on its own.
    times: list[float] = []
    outcomes: dict[str, int] = {}
    targets: list[int] = []
    slowest: dict[str, tuple[float, str, int]] = {}
    for i, name in enumerate(sorted(tree.cluster_queues)):
        for gpus in (8, 72):
            w = incoming(name, gpus, i)
            t0 = time.perf_counter()
            d = decide(w)[0]
            dt = (time.perf_counter() - t0) * 1e6
            times.append(dt)
            outcomes[f"{gpus}gpu_{d.outcome}"] = outcomes.get(f"{gpus}gpu_{d.outcome}", 0) + 1
            if d.preemption and d.preemption.targets:
                targets.append(len(d.preemption.targets))
            if dt > slowest.get(d.outcome, (0.0, "", 0))[0]:
                slowest[d.outcome] = (dt, name, gpus)
    times.sort()
    results["one_decision_every_queue"] = {
        "n": len(times),
        "p50_us": round(times[len(times) // 2], 1),
        "p90_us": round(times[int(len(times) * 0.9)], 1),
        "p99_us": round(times[int(len(times) * 0.99)], 1),
        "max_us": round(times[-1], 1),
        "outcomes": outcomes,
        "targets_per_preemption": sorted(targets),
    }
    fitting = next(n for n in sorted(tree.cluster_queues) if decide(incoming(n, 1))[0].outcome == "admit")
    results["one_decision_that_fits"] = measure(partial(decide, incoming(fitting, 1)), runs=200)
    # The slowest decision of each outcome above, re-timed on its own.
    for outcome, (_, name, gpus) in sorted(slowest.items()):
        timed: dict[str, Any] = dict(measure(partial(decide, incoming(name, gpus)), runs=50, warmup=3))
        timed["cluster_queue"], timed["gpus"] = name, gpus
        results[f"slowest_{outcome}_decision"] = timed
    return results


if __name__ == "__main__":
    print(write("quota", main()))

"""What ``kilter simulate`` prints and writes: the table columns, the per-class table, the comparison with the best
other policy, and the JSON/YAML report with the settings a run used."""

from __future__ import annotations

import argparse
import math
from typing import Any

from kilter.cli import render
from kilter.cli.spare_flag import read_spare_nodes
from kilter.model.durations import parse_duration
from kilter.sim.engine import SimConfig
from kilter.sim.failure_model import FailureSettings
from kilter.sim.maintenance_spec import MaintenanceSettings
from kilter.sim.metrics import versus_best
from kilter.sim.placement import waits_for_fewer_domains
from kilter.sim.run import Run

__all__ = [
    "CLASSES",
    "CLASS_COLUMNS",
    "COLUMNS",
    "FAILURE_COLUMNS",
    "class_table",
    "failure_report",
    "maintenance_report",
    "report",
    "versus_kilter",
]


COLUMNS = (
    ("jobs", "JOBS"),
    ("completed", "DONE"),
    ("neverFit", "NEVER FIT"),
    ("meanWaitSeconds", "MEAN WAIT s"),
    ("p95WaitSeconds", "P95 WAIT s"),
    ("maxWaitSeconds", "MAX WAIT s"),
    ("meanJctSeconds", "MEAN JCT s"),
    ("p95BoundedSlowdown", "P95 BSLD"),
    ("utilization", "UTIL"),
    ("usefulUtilization", "USEFUL"),
    ("singleDomainFraction", "1-DOMAIN"),
    ("meanDomainsPerGang", "DOMAINS/MIN"),
    ("fragmentation", "FRAG"),
    ("jainFairness", "JAIN"),
    ("preemptions", "PREEMPT"),
    ("splitWaited", "SPLIT WAITS"),
    ("splitWaitMeanSeconds", "MEAN SPLIT WAIT s"),
)


CLASS_COLUMNS = (
    ("jobs", "JOBS"),
    ("meanWaitSeconds", "MEAN WAIT s"),
    ("p95WaitSeconds", "P95 WAIT s"),
    ("meanJctSeconds", "MEAN JCT s"),
)


CLASSES = (("oneDomain", "1-DOMAIN"), ("multiDomain", "MULTI-DOMAIN"))


FAILURE_COLUMNS = (
    ("failurePolicy", "ON FAILURE"),
    ("failuresInjected", "FAILURES"),
    ("gangsHitByFailures", "GANGS HIT"),
    ("failureEvictions", "REQUEUED"),
    ("goodput", "GOODPUT"),
    ("gpuHoursLostToFailures", "LOST GPU-h"),
    ("repairs", "REPAIRS"),
    ("repairsSameDomainFraction", "SAME DOMAIN"),
    ("meanResumeSeconds", "MEAN RESUME s"),
    ("p95ResumeSeconds", "P95 RESUME s"),
)


def class_table(runs: list[Run]) -> str:
    """Each policy's wait and JCT apart for one-domain and multi-domain jobs."""
    headers = ("POLICY", *(f"{c} {h}" for _, c in CLASSES for _, h in CLASS_COLUMNS))
    rows = [(r.policy, *(r.metrics["classes"][key][k] for key, _ in CLASSES for k, _ in CLASS_COLUMNS)) for r in runs]
    return render.table(headers, rows)


def versus_kilter(runs: list[Run]) -> dict[str, Any]:
    """kilter against the best of the policies that run without kilter's rule (``metrics.versus_best``)."""
    others = [r.policy for r in runs if not waits_for_fewer_domains(r.simulation.policy)]
    return versus_best({r.policy: r.metrics for r in runs}, ours="kilter", others=others)


def maintenance_report(spec: MaintenanceSettings, failures: FailureSettings) -> dict[str, Any]:
    """The rollout's settings as a report carries them (the runtime estimate is the split wait's, reported there)."""
    return {
        "atSeconds": spec.at_s,
        "stepSeconds": spec.step_s,
        "k": spec.k,
        "maxWaitSeconds": spec.max_wait_s,
        "windowSeconds": spec.window_s,
        "checkpointMinutes": failures.checkpoint_s / 60,
        "restartMinutes": failures.restart_s / 60,
    }


def failure_report(config: SimConfig, args: argparse.Namespace) -> dict[str, Any]:
    """The failure and spare settings a report ran with (nothing when nodes never failed and no spares were held)."""
    spares = read_spare_nodes(args.spare_nodes_per_domain)
    out: dict[str, Any] = {"spareNodesPerDomain": spares} if spares else {}
    f = config.failures
    if f is not None and math.isfinite(f.node_mtbf_h):
        out["failures"] = {
            "nodeMtbfHours": f.node_mtbf_h,
            "repairHours": f.repair_h,
            "checkpointMinutes": f.checkpoint_s / 60,
            "restartMinutes": f.restart_s / 60,
            "policy": f.policy or "auto",
        }
    return out


def report(runs: list[Run], args: argparse.Namespace) -> dict[str, Any]:
    first = runs[0].simulation
    return {
        "trace": args.trace,
        "fleet": str(args.fleet),
        "quota": args.quota,
        "topologyRequest": args.topology_request,
        "splitSlowdown": args.split_slowdown,
        "blockSlowdown": args.block_slowdown,
        "splitModel": args.split_model,
        "splitWait": {
            "factor": args.split_wait,
            "maxSeconds": parse_duration(args.split_wait_max, path="--split-wait-max"),
            "runtimeEstimate": args.runtime_estimate,
            "holds": args.split_wait_holds,
            "clock": args.split_wait_clock,
            "splitSlowdown": first.config.split_wait.split_slowdown,
            "policies": [r.policy for r in runs if r.simulation.hold is not None],
        },
        **failure_report(first.config, args),
        "queueOf": first.queues.queue_of,
        "policies": {r.policy: r.metrics for r in runs},
    }

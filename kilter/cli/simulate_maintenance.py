"""``kilter simulate --maintenance``: the trace with no rollout, then with kilter's planned drain and the naive one
(``kilter.sim.maintenance``), and their table."""

from __future__ import annotations

import argparse
import dataclasses
import math
import time

from kilter.cli import render
from kilter.cli.simulate_inputs import one_fleet_inputs, policies, progress_bar, sim_config
from kilter.cli.simulate_report import maintenance_report, report
from kilter.model.errors import InputError
from kilter.sim.maintenance_spec import ORDERS, parse_maintenance
from kilter.sim.run import Run, simulate
from kilter.topology import split_wait

__all__ = ["MAINTENANCE_COLUMNS", "TRACE_COLUMNS", "run_maintenance"]


MAINTENANCE_COLUMNS = (
    ("domainsMaintained", "DOMAINS"),
    ("steps", "STEPS"),
    ("jobsKilled", "KILLED"),
    ("gpuHoursLostToMaintenance", "LOST GPU-h"),
    ("gpuHoursIdleCordoned", "IDLE GPU-h"),
    ("rolloutHours", "ROLLOUT h"),
    ("mostDomainsOut", "MOST OUT"),
)


TRACE_COLUMNS = (
    ("completed", "DONE"),
    ("meanWaitSeconds", "MEAN WAIT s"),
    ("p95WaitSeconds", "P95 WAIT s"),
    ("meanJctSeconds", "MEAN JCT s"),
    ("utilization", "UTIL"),
)


def run_maintenance(args: argparse.Namespace) -> int:
    """``--maintenance``: the trace with no rollout, then with kilter's and the naive one (``kilter.sim.maintenance``),
    under one placement policy, on fresh fleets of the same seed."""
    spec = parse_maintenance(args.maintenance)
    names = policies(args.policy)
    if len(names) != 1:
        raise InputError("--maintenance compares rollouts under one placement policy: give one --policy")
    for flag, value in (("--sweep", args.sweep), ("--plot", args.plot)):
        if value is not None:
            raise InputError(f"{flag} cannot be combined with --maintenance")
    config = sim_config(args)
    jobs, queue_objects, make_fleet = one_fleet_inputs(args)
    rollouts: list[tuple[str, Run]] = []
    assert config.failures is not None
    failures = config.failures if math.isfinite(config.failures.node_mtbf_h) else None
    baseline = dataclasses.replace(config, failures=failures)  # no rollout: nothing is killed, no checkpoint matters
    for order in (None, *ORDERS):
        label: str = order or "none"
        started = time.perf_counter()
        r = simulate(
            make_fleet, jobs, names[0], queue_objects=queue_objects,
            config=dataclasses.replace(config, maintenance=spec.ordered_by(order)) if order else baseline,
            seed=args.seed, progress=progress_bar(f"maintenance {label}"),
        )  # fmt: skip
        r.metrics["wallSeconds"] = round(time.perf_counter() - started, 2)
        rollouts.append((label, r))
    if args.output != "table":
        data = {
            **report([r for _, r in rollouts], args),
            "placement": names[0],
            "maintenance": maintenance_report(spec, config.failures),
            "rollouts": {label: r.metrics for label, r in rollouts},
        }
        del data["policies"]
        print(render.dump(data, args.output), end="")
        return 0
    rows = [
        (label, *(r.metrics.get(k, "-") for k, _ in MAINTENANCE_COLUMNS), *(r.metrics[k] for k, _ in TRACE_COLUMNS))
        for label, r in rollouts
    ]
    headers = ("MAINTENANCE", *(h for _, h in MAINTENANCE_COLUMNS), *(h for _, h in TRACE_COLUMNS))
    print(render.table(headers, rows), end="")
    f = config.failures
    window = f", window {split_wait.format_duration(spec.window_s)}" if spec.window_s is not None else ""
    print(
        f"\nrollout from {split_wait.format_duration(spec.at_s)}, {split_wait.format_duration(spec.step_s)} per "
        f"domain, k={spec.k}, waits at most {split_wait.format_duration(spec.max_wait_s)}{window}; checkpoints every "
        f"{f.checkpoint_s / 60:g} min; runtime estimates {config.split_wait.runtime_estimate}; placement {names[0]}"
    )
    for label, r in rollouts:
        if "withinWindow" in r.metrics:
            print(f"{label}: {'within' if r.metrics['withinWindow'] else 'NOT within'} the window")
    return 0

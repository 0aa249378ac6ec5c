"""How fast ``kilter simulate`` replays a whole trace, and what ``kilter demo`` costs end to end.

Target (issue #8): the whole Philly trace (82k jobs) on a 2,304-GPU fleet
(32 GB200 NVL72 racks) in at most 60 s with the kilter policy. The real
trace lives outside the repository; the synthetic Philly profile, which
has the same job count, size mix and arrival pattern, is measured always,
the real trace when ``../shared`` holds it. Every policy is timed on the
synthetic trace at GPU scale 1 and 4 (gangs four times the size), and the
demo (kilter over HTTP against two baselines) once.

Target (issue #36): the whole real Philly trace at GPU scale 4 on the
40-rack fleet of docs/simulation.md, every policy one after the other in
one process (``kilter simulate --policy all``), in at most 10 minutes.
"""

from __future__ import annotations

import argparse
import resource
import time
from collections import Counter
from pathlib import Path
from typing import Any

from kilter.cli import demo_compare
from kilter.sim import fleetspec, synthetic
from kilter.sim.engine import SimConfig
from kilter.sim.policies import POLICIES
from kilter.sim.run import simulate
from kilter.sim.trace import TraceJob, read_trace

TARGET_S = 60.0
ALL_POLICIES_TARGET_S = 600.0
FLEET_40 = {
    "platforms": [
        {"platform": "GB200-NVL72", "domains": 40, "domainsPerBlock": 8, "blocksPerSpine": 4, "unhealthyNodes": 6}
    ]
}
FLEET = {"platforms": [{"platform": "GB200-NVL72", "domains": 32, "domainsPerBlock": 8, "unhealthyNodes": 6}]}
PHILLY = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "philly" / "philly.csv"


def _run(jobs: list[TraceJob], policy: str, fleet: dict[str, Any] = FLEET) -> dict[str, Any]:
    spec = fleetspec.parse_spec(fleet, seed=0)
    started = time.perf_counter()
    cpu0 = time.process_time()
    r = simulate(lambda: fleetspec.fleet_from_spec(spec), jobs, policy, config=SimConfig())
    return {
        "wall_s": round(time.perf_counter() - started, 2),
        "cpu_s": round(time.process_time() - cpu0, 2),
        "jobs_per_s": round(len(jobs) / (time.perf_counter() - started)),
        "completed": r.metrics["completed"],
        "meanWaitSeconds": r.metrics["meanWaitSeconds"],
        "tenants": len(Counter(j.queue for j in jobs)),
    }


def _all_policies(jobs: list[TraceJob]) -> dict[str, Any]:
    """Every policy on the real trace and the 40-rack fleet, one after the other: the scoreboard's cost."""
    started = time.perf_counter()
    each = {policy: _run(jobs, policy, FLEET_40)["wall_s"] for policy in POLICIES}
    wall = round(time.perf_counter() - started, 1)
    return {
        "fleet": FLEET_40,
        "gpu_scale": 4,
        "wall_s": wall,
        "target_s": ALL_POLICIES_TARGET_S,
        "target_met": wall <= ALL_POLICIES_TARGET_S,
        "per_policy_wall_s": each,
    }


def main() -> dict[str, Any]:
    out: dict[str, Any] = {"target_s": TARGET_S, "fleet": FLEET, "runs": {}}
    for scale in (1, 4):
        jobs = synthetic.generate("philly", seed=0, gpu_scale=scale)
        for policy in POLICIES:
            out["runs"][f"synthetic:philly x{scale} {policy}"] = _run(jobs, policy)
            print(f"synthetic x{scale} {policy}: {out['runs'][f'synthetic:philly x{scale} {policy}']}", flush=True)
    if PHILLY.is_file():
        for scale in (1, 4):
            key = f"philly.csv x{scale} kilter"
            out["runs"][key] = _run(read_trace(PHILLY, gpu_scale=scale), "kilter")
            print(f"{key}: {out['runs'][key]}", flush=True)
        out["allPolicies"] = _all_policies(read_trace(PHILLY, gpu_scale=4))
        print(f"all policies: {out['allPolicies']}", flush=True)
    else:
        out["real_trace"] = f"skipped: {PHILLY} is absent"
    kilter = [v["wall_s"] for k, v in out["runs"].items() if k.endswith(" kilter")]
    out["kilter_max_wall_s"] = max(kilter)
    out["target_met"] = max(kilter) <= TARGET_S
    started = time.perf_counter()
    args = argparse.Namespace(
        trace=None, jobs=demo_compare.DEMO_JOBS, gpu_scale=demo_compare.DEMO_GPU_SCALE, seed=0, plot=None
    )
    report = demo_compare.run_comparison(args)
    out["demo"] = {
        "wall_s": round(time.perf_counter() - started, 1),
        "target_s": 40.0,
        "extender_calls": report["policies"]["kilter"]["extenderCalls"],
        "per_policy_wall_s": {k: v["wallSeconds"] for k, v in report["policies"].items()},
    }
    out["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(main(), indent=2))

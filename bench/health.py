"""What health signals cost a fleet build: the 5,004-node GB200 fleet judged and built with and without them.

Target (issue #20): the default signals must not make a 5,004-node build
measurably slower than the built-in rules alone. The nodes are shaped as a
real cluster holds them (``extender.full_node``: the kubelet's five
conditions, NFD and GFD labels), decoded from JSON as a watch or a snapshot
file gives them (each string its own object, its hash not yet known); the ``nvsentinel`` variant adds the
fifteen conditions NVSentinel keeps on every node it watches, all ``False``
(healthy), so that each condition of a node is looked up. No node matches a
signal: the common case.

Two figures per variant, each with no signal (``HealthSignals()``: the
built-in rules only) and with ``DEFAULTS``: ``build_fleet`` is the whole
build, the figure that matters; ``judge_all_nodes`` is ``unusable_reason``
alone over the 5,004 nodes, an upper bound of what the signals add (run on
its own, each node's labels are cold in the cache, where the build has just
read them). Times are the thread's CPU time (other processes on this shared
2-core machine do not count), the two settings timed in alternation run by
run; the minimum is the steadiest figure, p50 is given too.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from bench.common import environment, machine_speed
from bench.extender import FLEET, _images, full_node
from kilter.model import codec
from kilter.model.core_v1 import Node, Pod
from kilter.topology import fleetgen
from kilter.topology.fleet import build_fleet
from kilter.topology.health import DEFAULTS, ConditionSignal, HealthSignals

JUDGE_RUNS = 200
BUILD_RUNS = 40


def _nodes(*, nvsentinel: bool) -> tuple[list[Node], list[Pod]]:
    node_dicts, pod_dicts = fleetgen.generate(FLEET)
    rng = random.Random(7)
    images = _images(rng)
    watched = [s.condition for s in DEFAULTS.signals if isinstance(s, ConditionSignal) and s.source == "NVSentinel"]
    nodes = []
    for i, raw in enumerate(node_dicts):
        full = full_node(raw, i, rng, images)
        if nvsentinel:
            full["status"]["conditions"] += [{"type": c, "status": "False", "reason": f"{c}IsHealthy"} for c in watched]
        nodes.append(msgspec.json.decode(msgspec.json.encode(full), type=Node))  # as a watch or a snapshot reads it
    return nodes, [codec.convert(p, Pod) for p in pod_dicts]


def _alternate(fns: dict[str, Callable[[], object]], *, runs: int, warmup: int = 3) -> dict[str, dict[str, float]]:
    """Each callable timed ``runs`` times, in turn within each run; min and p50 in milliseconds."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples = {name: np.empty(runs) for name in fns}
    for i in range(runs):
        for name, fn in fns.items():
            t0 = time.thread_time_ns()
            fn()
            samples[name][i] = (time.thread_time_ns() - t0) / 1e6
    return {
        name: {"n": runs, "min_ms": round(float(s.min()), 3), "p50_ms": round(float(np.percentile(s, 50)), 3)}
        for name, s in samples.items()
    }


def main() -> dict[str, Any]:
    results: dict[str, Any] = {"environment": environment(), "machine_speed_us": machine_speed(), "variants": {}}
    none = HealthSignals()
    for variant, nvsentinel in (("kubelet_conditions", False), ("nvsentinel", True)):
        nodes, pods = _nodes(nvsentinel=nvsentinel)
        judge = _alternate(
            {
                "builtin_rules_only": lambda: [none.unusable_reason(n) for n in nodes],  # noqa: B023
                "defaults": lambda: [DEFAULTS.unusable_reason(n) for n in nodes],  # noqa: B023
            },
            runs=JUDGE_RUNS,
        )
        build = _alternate(
            {
                "builtin_rules_only": lambda: build_fleet(nodes, pods, health=none),  # noqa: B023
                "defaults": lambda: build_fleet(nodes, pods, health=DEFAULTS),  # noqa: B023
            },
            runs=BUILD_RUNS,
        )
        added = build["defaults"]["min_ms"] - build["builtin_rules_only"]["min_ms"]
        results["variants"][variant] = {
            "nodes": len(nodes),
            "conditions_per_node": len(nodes[0].status.conditions),
            "signals": len(DEFAULTS),
            "build_fleet": build,
            "judge_all_nodes": judge,
            "defaults_add_to_build_ms": round(added, 3),
            "defaults_add_to_build_pct": round(100 * added / build["builtin_rules_only"]["min_ms"], 2),
        }
    return results

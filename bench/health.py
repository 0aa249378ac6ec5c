"""What health signals cost a fleet build: the 5,004-node GB200 fleet built with and without them.

Target (issue #20): the default signals must not make a 5,004-node build
measurably slower than the built-in rules alone. The nodes are shaped as a
real cluster holds them (``extender.full_node``: the kubelet's five
conditions, NFD and GFD labels); the ``nvsentinel`` variant adds the
fourteen conditions NVSentinel keeps on every node it watches, all ``False``
(healthy), so that each condition of the node is looked up. Each variant
records the p50/p99 build time with no signal (``HealthSignals()``: the
built-in rules only) and with ``DEFAULTS``, and the ratio.
"""

from __future__ import annotations

import random
from typing import Any

from bench.common import environment, machine_speed, measure
from bench.extender import FLEET, _images, full_node
from kilter.model import codec
from kilter.model.core_v1 import Node, Pod
from kilter.topology import fleetgen
from kilter.topology.fleet import build_fleet
from kilter.topology.health import DEFAULTS, ConditionSignal, HealthSignals

RUNS = 30


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
        nodes.append(codec.convert(full, Node))
    return nodes, [codec.convert(p, Pod) for p in pod_dicts]


def main() -> dict[str, Any]:
    results: dict[str, Any] = {"environment": environment(), "machine_speed_us": machine_speed(), "variants": {}}
    for variant, nvsentinel in (("kubelet_conditions", False), ("nvsentinel", True)):
        nodes, pods = _nodes(nvsentinel=nvsentinel)
        none = measure(lambda: build_fleet(nodes, pods, health=HealthSignals()), runs=RUNS, warmup=3)  # noqa: B023
        defaults = measure(lambda: build_fleet(nodes, pods, health=DEFAULTS), runs=RUNS, warmup=3)  # noqa: B023
        results["variants"][variant] = {
            "nodes": len(nodes),
            "signals": len(DEFAULTS),
            "builtin_rules_only": none,
            "defaults": defaults,
            "p50_ratio": round(defaults["p50_us"] / none["p50_us"], 3),
        }
    return results

"""Spare nodes on the 5,004-node GB200 NVL72 fleet (278 racks of 18 trays): the cost of choosing them per plan.

Target (issue #20): the spare mask is recomputed for every new plan, since every booking moves it, so it must
cost well under 100 us at 5,004 nodes. Timed on a fleet whose racks come and go by the rack (``usage_mode``
"racks": a quarter idle, a sixth full, the rest partly used) with 2 spares a rack: the mask alone, the planner's
mask with spares taken out (``usable_mask``), the per-domain counts (``tally``: /metrics, the inventory), and a
16 x 4-GPU gang planned with and without spares held.
"""

from __future__ import annotations

from typing import Any

from bench.common import machine_speed, measure
from kilter.model import codec
from kilter.model.core_v1 import Node, Pod, PodTemplateSpec
from kilter.model.jobs import PodSetSpec, TopologyRequest
from kilter.topology import fleetgen, spares
from kilter.topology.fleet import build_fleet
from kilter.topology.plan import gang_request, plan_gang

RACKS = 278  # 5,004 trays


def main() -> dict[str, Any]:
    pool = fleetgen.PoolSpec("GB200-NVL72", domains=RACKS, domains_per_block=8, usage_mode="racks", unhealthy_nodes=40)
    node_dicts, pod_dicts = fleetgen.generate(fleetgen.FleetSpec((pool,), seed=42))
    fleet = build_fleet([codec.convert(n, Node) for n in node_dicts], [codec.convert(p, Pod) for p in pod_dicts])
    spares.assign(fleet, [2] * len(fleet.domain_ids))
    template = codec.convert(
        {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}, PodTemplateSpec
    )
    request = gang_request("g", [PodSetSpec("w", 16, template, TopologyRequest())], fleet.catalog)
    counts = spares.tally(fleet)
    return {
        "nodes": fleet.n_nodes,
        "domains": len(fleet.domain_ids),
        "spares_per_domain": 2,
        "held": int(counts.held.sum()),
        "used": int(counts.used.sum()),
        "short": int(counts.short.sum()),
        "held_mask": measure(lambda: spares.held_mask(fleet), runs=2000),
        "usable_mask": measure(lambda: spares.usable_mask(fleet, None), runs=2000),
        "tally": measure(lambda: spares.tally(fleet), runs=2000),
        "plan_16x4_spares_held": measure(lambda: plan_gang(fleet, request), runs=500),
        "plan_16x4_spares_usable": measure(lambda: plan_gang(fleet, request, hold_spares=False), runs=500),
        "machine_speed_us": machine_speed(),
    }

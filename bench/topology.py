"""Topology core on a 100,000-GPU GB200 NVL72 fleet.

Targets (issue #2): plan a 16 x 4-GPU gang in <= 100 us median and a 512-pod
gang in <= 2 ms; score one pod against 5,000 nodes given by name in <= 200 us;
build the model from 25,000 Node objects in <= 1 s; the core >= 20x faster than
its twin at planning; <= 2 MiB of model per 100,000 GPUs.

Plans are timed on two fleets (issue #18): ``random_60`` books each GPU
independently with probability 0.6 (the harshest fragmentation, but no rack
is idle, so the choice between idle and partly used racks never arises);
``racks`` has a quarter of the racks idle, a sixth full and the rest partly
used in whole trays, where the choice of the domain set is a real search.
Each plan also records how many domains and leaves it used.
"""

from __future__ import annotations

import json
import random
import time
from functools import partial
from typing import Any

import numpy as np

from bench.common import measure, write
from kilter._native import gang
from kilter._native.twin import domains as twin_domains
from kilter._native.twin import gang as twin_gang
from kilter.model import codec
from kilter.model.core_v1 import Node, Pod, PodTemplateSpec
from kilter.model.jobs import PodSetSpec, TopologyRequest
from kilter.model.kueue import Topology
from kilter.topology import fleetgen, plan, score
from kilter.topology.fleet import Fleet, build_fleet

DOMAINS = 1389  # ceil(100,000 / 72)


FLEETS: dict[str, fleetgen.PoolSpec] = {
    "random_60": fleetgen.PoolSpec("GB200-NVL72", domains=DOMAINS, domains_per_block=8, blocks_per_spine=8, usage=0.6),
    "racks": fleetgen.PoolSpec(
        "GB200-NVL72", domains=DOMAINS, domains_per_block=8, blocks_per_spine=8, usage_mode="racks"
    ),
}


def make_fleet(pool: fleetgen.PoolSpec) -> tuple[Fleet, list[Node], list[Pod], float, float]:
    spec = fleetgen.FleetSpec((pool,), seed=42)
    node_dicts, pod_dicts = fleetgen.generate(spec)
    t1 = time.perf_counter()
    nodes = [codec.convert(n, Node) for n in node_dicts]
    pods = [codec.convert(p, Pod) for p in pod_dicts]
    decode_s = time.perf_counter() - t1
    topo = codec.convert(fleetgen.topology_object(), Topology)
    t2 = time.perf_counter()
    fleet = build_fleet(nodes, pods, topologies=[topo])
    build_s = time.perf_counter() - t2
    return fleet, nodes, pods, build_s, decode_s


def core_args(mod: Any, count: int, gpus: int) -> tuple[Any, ...]:
    """One pod set, preferring one domain (what an unannotated gang gets), on platform 0, for ``mod``'s planner."""
    return (mod.PodSets([(count, gpus, -1, int(gang.DOMAIN), 1, -1)]), 0, None)


def plan_core(mod: Any, fl: Any, args: tuple[Any, ...]) -> Any:
    """``mod.plan_gang``'s answer: its status and a node per pod."""
    return mod.plan_gang(fl, *args)


def pod_set(count: int, gpus: int) -> PodSetSpec:
    template = codec.convert(
        {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}},
        PodTemplateSpec,
    )
    return PodSetSpec("worker", count, template, TopologyRequest())


def twin_of(bm: Any) -> twin_domains.FleetBitmap:
    return twin_domains.FleetBitmap(
        bm.node_domains,
        bm.node_gpu_counts,
        bm.node_used_gpus,
        bm.node_usable_flags,
        bm.domain_node_start,
        np.array([4] * bm.n_domains, dtype=np.int32),
        bm.domain_platforms,
        bm.domain_flags,
        bm.domain_groups,
    )


def describe(fleet: Fleet) -> dict[str, Any]:
    bm = fleet.bitmap
    n_gpus = int(bm.node_gpu_counts.sum())
    return {
        "nodes": bm.n_nodes,
        "domains": bm.n_domains,
        "gpus": n_gpus,
        "idle_fraction": round(float(bm.domain_free_gpus.sum()) / n_gpus, 3),
        "wholly_idle_domains": int(bm.wholly_free().sum()),
    }


def time_plans(fleet: Fleet) -> dict[str, Any]:
    """Median plan times of the core, the twin and the Python API, and what the plans use."""
    bm = fleet.bitmap
    twin_fl = twin_of(bm)
    results: dict[str, Any] = {}
    for count, runs, twin_runs in ((16, 2000, 20), (512, 500, 5)):
        args = core_args(gang, count, 4)
        request = plan.gang_request("bench", [pod_set(count, 4)], fleet.catalog)
        native = measure(partial(plan_core, gang, bm, args), runs=runs)
        twin = measure(partial(plan_core, twin_gang, twin_fl, core_args(twin_gang, count, 4)), runs=twin_runs, warmup=1)
        api = measure(partial(plan.plan_gang, fleet, request), runs=runs)
        used = np.unique(bm.node_domains[plan_core(gang, bm, args).nodes])
        results[f"plan_{count}x4"] = {
            "core": native,
            "twin": twin,
            "core_speedup_vs_twin_p50": round(twin["p50_us"] / native["p50_us"], 1),
            "api_with_names": api,
            "domains_used": int(used.size),
            "leaves_used": int(np.unique(bm.domain_groups[0][used]).size),
        }
    return results


def main() -> dict[str, Any]:
    fleet, nodes, pods, build_s, decode_s = make_fleet(FLEETS["random_60"])
    bm = fleet.bitmap
    n_gpus = int(bm.node_gpu_counts.sum())
    results: dict[str, Any] = {
        "fleet": describe(fleet),
        "build_model_from_node_objects_s": round(build_s, 3),
        "decode_node_and_pod_dicts_s": round(decode_s, 3),
        "model_bytes": bm.nbytes,
        "model_bytes_per_100k_gpus": round(bm.nbytes * 100_000 / n_gpus),
        "plans": {"random_60": time_plans(fleet)},
    }
    racks, *_ = make_fleet(FLEETS["racks"])
    results["racks_fleet"] = describe(racks)
    results["plans"]["racks"] = time_plans(racks)
    del racks
    twin_fl = twin_of(bm)

    rng = random.Random(5)
    candidates = [fleet.node_names[i] for i in rng.sample(range(bm.n_nodes), 5000)]
    planned = [fleet.node_index[n] for n in candidates[:16]]
    results["score_5000_names"] = measure(
        lambda: score.score_pod(fleet, candidates, gpus=4, planned=planned), runs=3000
    )
    names_json = json.dumps(candidates).encode()
    results["score_5000_names_from_json_bytes"] = measure(
        lambda: score.score_pod_json(fleet, names_json, gpus=4, planned=planned), runs=3000
    )
    idx = np.array([fleet.node_index[n] for n in candidates], dtype=np.int32)
    out = np.empty(5000, dtype=np.int8)
    plan_sorted = np.unique(np.array(planned, dtype=np.int32))
    results["score_5000_indices_core"] = measure(lambda: gang.score_nodes(bm, idx, 4, plan_sorted, out), runs=3000)
    twin_out = np.empty(5000, dtype=np.int8)
    results["score_5000_indices_twin"] = measure(
        lambda: twin_gang.score_nodes(twin_fl, idx, 4, plan_sorted, twin_out), runs=20, warmup=1
    )
    alloc_node = int(np.argmax(bm.node_usable_flags & (bm.node_used_gpus == 0)))

    def book_and_release() -> None:
        bm.allocate(alloc_node, 4)
        bm.release(alloc_node, 4)

    results["allocate_release_one_pod"] = measure(book_and_release, runs=20000)
    del nodes, pods
    return results


if __name__ == "__main__":
    res = main()
    print(write("topology", res))

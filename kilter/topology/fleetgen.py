"""Realistic synthetic fleets, shaped exactly as ``kubectl get nodes,pods -o yaml`` prints them.

Used by ``kilter demo``, by tests and by benchmarks that need fleets of any
size with no cluster. Nodes carry the labels real clusters carry (GPU
Feature Discovery's product and clique labels, Topograph fabric tiers, AMD's
product name); some trays are cordoned or NotReady and some lost their clique
label, as failed fabric does; bound pods hold part of the GPUs. Everything
is seeded, so a spec always yields the same fleet.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from kilter.model.annotations import PLATFORM, PRODUCT
from kilter.model.kueue import HOSTNAME_LABEL
from kilter.topology.catalog import BUILTIN, Catalog, Platform

__all__ = ["DEMO_FLEET", "FleetSpec", "PoolSpec", "generate", "topology_object"]

TIER1 = "fabric.topograph.run/tier-1"
TIER2 = "fabric.topograph.run/tier-2"
CLIQUE = "nvidia.com/gpu.clique"

_PRODUCT = {
    "GB300-NVL72": "NVIDIA-GB300",
    "GB200-NVL72": "NVIDIA-GB200",
    "GB200-NVL36x2": "NVIDIA-GB200",
    "VR-NVL72": "NVIDIA-Vera-Rubin",
    "RUBIN-ULTRA-NVL576": "NVIDIA-Rubin-Ultra",
    "MI455X-HELIOS": "AMD_Instinct_MI455X",
    "MI355X-8": "AMD_Instinct_MI355X",
    "MI325X-8": "AMD_Instinct_MI325X",
    "MI300X-8": "AMD_Instinct_MI300X_OAM",
    "HGX-B300-8": "NVIDIA-B300-SXM6-AC",
    "HGX-B200-8": "NVIDIA-B200",
    "HGX-H200-8": "NVIDIA-H200",
    "HGX-H100-8": "NVIDIA-H100-80GB-HBM3",
}


@dataclass(frozen=True)
class PoolSpec:
    """One platform's share of a fleet.

    ``domains`` counts racks for multi-node platforms; ``nodes`` counts nodes
    for platforms whose node is the domain. ``usage`` is the fraction of GPUs
    held by running pods: ``random`` draws each node's usage independently,
    ``jobs`` books whole trays in runs, as finished gangs leave them.
    ``racks`` ignores ``usage`` and shapes a fleet whose gangs come and go by
    the rack: a quarter of the domains wholly idle, a sixth full, the rest
    holding 1 .. n-1 busy whole trays (GPUs, for one-node domains), so that
    a planner must choose between idle and partly used domains.
    """

    platform: str
    domains: int = 0
    nodes: int = 0
    domains_per_block: int = 8
    blocks_per_spine: int = 0
    unhealthy_nodes: int = 0
    unlabeled_nodes: int = 0
    usage: float = 0.0
    usage_mode: Literal["random", "jobs", "racks"] = "random"
    prefix: str = ""


@dataclass(frozen=True)
class FleetSpec:
    pools: tuple[PoolSpec, ...]
    seed: int = 0


DEMO_FLEET = FleetSpec(
    pools=(
        PoolSpec(
            "GB200-NVL72",
            domains=32,
            domains_per_block=8,
            blocks_per_spine=2,
            unhealthy_nodes=6,
            unlabeled_nodes=2,
            usage=0.45,
            usage_mode="jobs",
            prefix="gb200",
        ),
        PoolSpec(
            "MI355X-8",
            nodes=16,
            domains_per_block=8,
            blocks_per_spine=2,
            unhealthy_nodes=1,
            usage=0.3,
            usage_mode="jobs",
            prefix="mi355x",
        ),
    ),
    seed=7,
)


def _node(name: str, platform: Platform, labels: dict[str, str], *, ready: bool, cordoned: bool) -> dict[str, Any]:
    gpus = str(platform.gpus_per_node)
    cpu, memory = ("144", "884Gi") if platform.is_multi_node else ("192", "2Ti")
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {HOSTNAME_LABEL: name, **labels}},
        "spec": {},
        "status": {
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110", platform.device_resource: gpus},
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110", platform.device_resource: gpus},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady"}],
        },
    }
    if cordoned:
        node["spec"] = {
            "unschedulable": True,
            "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
        }
    return node


def _pod(name: str, node: str, resource: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "training", "labels": {"app": "trainer"}},
        "spec": {
            "nodeName": node,
            "schedulerName": "default-scheduler",
            "containers": [
                {
                    "name": "trainer",
                    "image": "nvcr.io/nvidia/pytorch:25.10-py3",
                    "resources": {"limits": {resource: str(gpus)}, "requests": {resource: str(gpus)}},
                }
            ],
        },
        "status": {"phase": "Running"},
    }


def _pool(spec: PoolSpec, platform: Platform, rng: random.Random) -> tuple[list[dict[str, Any]], list[int]]:
    prefix = spec.prefix or platform.name.lower()
    nodes: list[dict[str, Any]] = []
    racks: list[int] = []
    n_racks = spec.domains if platform.is_multi_node else 0
    per_rack = platform.nodes_per_domain if platform.is_multi_node else 1
    count = n_racks * per_rack if platform.is_multi_node else spec.nodes
    per_block = spec.domains_per_block * per_rack
    product = _PRODUCT.get(platform.name, platform.name)
    product_key = platform.product_label_keys[0] if platform.product_label_keys else PRODUCT
    cluster_uuids = [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(n_racks)]
    bad = set(rng.sample(range(count), min(spec.unhealthy_nodes, count)))
    unlabeled = set(rng.sample(sorted(set(range(count)) - bad), min(spec.unlabeled_nodes, count - len(bad))))
    for i in range(count):
        rack, tray = divmod(i, per_rack)
        block = i // per_block
        labels = {
            product_key: product,
            TIER1: f"{prefix}-leaf-{block:02d}",
        }
        if platform.vendor == "nvidia":
            labels["nvidia.com/gpu.count"] = str(platform.gpus_per_node)
        if spec.blocks_per_spine:
            labels[TIER2] = f"{prefix}-spine-{block // spec.blocks_per_spine:02d}"
        if platform.is_multi_node:
            name = f"{prefix}-r{rack:03d}-t{tray:02d}"
            if i not in unlabeled:
                key = CLIQUE if platform.vendor == "nvidia" else "accelerator.topograph.run/domain"
                labels[key] = f"{cluster_uuids[rack]}.{32766 - rack}"
        else:
            name = f"{prefix}-n{i:04d}"
        if platform.name == "GB200-NVL36x2" or platform.provisional:
            labels[PLATFORM] = platform.name
        cordoned = i in bad and rng.random() < 0.5
        nodes.append(_node(name, platform, labels, ready=not (i in bad and not cordoned), cordoned=cordoned))
        racks.append(rack if platform.is_multi_node else i)
    return nodes, racks


def _usage(spec: PoolSpec, platform: Platform, nodes: list[dict[str, Any]], rng: random.Random) -> list[int]:
    g = platform.gpus_per_node
    if spec.usage_mode == "racks":
        return _rack_usage(platform, len(nodes), rng)
    if spec.usage <= 0:
        return [0] * len(nodes)
    if spec.usage_mode == "random":
        return [sum(rng.random() < spec.usage for _ in range(g)) for _ in nodes]
    used = [0] * len(nodes)
    target = int(spec.usage * g * len(nodes))
    booked = 0
    idle = len(nodes)
    while booked < target and idle:
        start = rng.randrange(len(nodes))
        run = rng.choice((2, 4, 8, 8, 16)) if platform.is_multi_node else 1
        for i in range(start, min(start + run, len(nodes))):
            if used[i] == 0 and booked < target:
                used[i] = g if g == 1 or rng.random() < 0.85 else rng.randint(1, g - 1)
                booked += used[i]
                idle -= 1
    return used


def _rack_usage(platform: Platform, n_nodes: int, rng: random.Random) -> list[int]:
    g = platform.gpus_per_node
    per_domain = platform.nodes_per_domain if platform.is_multi_node else 1
    units = per_domain if platform.is_multi_node else g  # whole trays, or GPUs of a one-node domain
    used: list[int] = []
    for start in range(0, n_nodes, per_domain):
        draw = rng.random()
        busy = 0 if draw < 1 / 4 else units if draw < 1 / 4 + 1 / 6 or units == 1 else rng.randint(1, units - 1)
        if platform.is_multi_node:
            n = min(per_domain, n_nodes - start)
            trays = set(rng.sample(range(n), min(busy, n)))
            used.extend(g if t in trays else 0 for t in range(n))
        else:
            used.append(busy)
    return used


def generate(spec: FleetSpec, catalog: Catalog | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Node and Pod objects of the fleet (bound pods hold the used GPUs)."""
    catalog = catalog or Catalog(BUILTIN)
    rng = random.Random(spec.seed)
    all_nodes: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for pool in spec.pools:
        platform = catalog.get(pool.platform)
        nodes, _ = _pool(pool, platform, rng)
        for node, used in zip(nodes, _usage(pool, platform, nodes, rng), strict=True):
            if used:
                name = node["metadata"]["name"]
                pods.append(_pod(f"job-{name}", name, platform.device_resource, used))
        all_nodes.extend(nodes)
    return all_nodes, pods


def topology_object(name: str = "gpu-fabric", *, with_spine: bool = True) -> dict[str, Any]:
    """A Kueue Topology matching the generated labels (coarsest level first)."""
    levels = ([{"nodeLabel": TIER2}] if with_spine else []) + [
        {"nodeLabel": TIER1},
        {"nodeLabel": CLIQUE},
        {"nodeLabel": HOSTNAME_LABEL},
    ]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": levels},
    }

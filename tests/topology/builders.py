"""Tiny builders of Node and Pod objects shaped as the API server returns them."""

from __future__ import annotations

from typing import Any

from kilter.model import codec
from kilter.model.core_v1 import Node, Pod

CLIQUE = "nvidia.com/gpu.clique"
TIER1 = "fabric.topograph.run/tier-1"


def node_dict(
    name: str,
    *,
    product: str = "NVIDIA-GB200",
    gpus: int = 4,
    resource: str = "nvidia.com/gpu",
    labels: dict[str, str] | None = None,
    ready: bool = True,
    cordoned: bool = False,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    key = "nvidia.com/gpu.product" if resource == "nvidia.com/gpu" else "amd.com/gpu.product-name"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, key: product, **(labels or {})},
        },
        "spec": {"unschedulable": cordoned, "taints": taints or []} if cordoned or taints else {},
        "status": {
            "allocatable": {"cpu": "144", resource: str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def node(name: str, **kw: Any) -> Node:
    return codec.convert(node_dict(name, **kw), Node)


def rack(
    rack_id: str, trays: int = 18, *, block: str | None = None, prefix: str | None = None, **kw: Any
) -> list[Node]:
    labels = {CLIQUE: rack_id, **({TIER1: block} if block else {})}
    return [node(f"{prefix or rack_id}-t{t:02d}", labels=labels, **kw) for t in range(trays)]


def pod(name: str, node_name: str, gpus: int, *, phase: str = "Running", resource: str = "nvidia.com/gpu") -> Pod:
    return codec.convert(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": node_name,
                "containers": [{"name": "c", "resources": {"limits": {resource: str(gpus)}}}],
            },
            "status": {"phase": phase},
        },
        Pod,
    )

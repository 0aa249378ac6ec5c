"""ComputeDomains and the pods that join them, shaped as the API server returns them, for gang and extender tests."""

from __future__ import annotations

from typing import Any

from tests.extenders.conftest import pod_json

Obj = dict[str, Any]


def compute_domain(
    name: str,
    *,
    num_nodes: int = 0,
    annotations: dict[str, str] | None = None,
    template: str | None = None,
    namespace: str = "ml",
) -> Obj:
    """A ComputeDomain as the API server returns it (the CRD's defaults filled in, the driver's status)."""
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"cd-uid-{name}",
            "resourceVersion": "812",
            "creationTimestamp": "2026-12-04T10:00:00Z",
            "annotations": annotations or {},
        },
        "spec": {
            "numNodes": num_nodes,
            "channel": {"resourceClaimTemplate": {"name": template or f"{name}-channel"}, "allocationMode": "Single"},
        },
        "status": {"status": "NotReady"},
    }


def cd_pod(name: str, template: str, *, node: str = "", gpus: int = 4, labels: dict[str, str] | None = None) -> Obj:
    """A pod that claims an IMEX channel from ``template`` (and its GPUs through a claim of its own as well)."""
    pod = pod_json(name, gpus, node=node, labels=labels)
    pod["spec"]["resourceClaims"] = [
        {"name": "gpus", "resourceClaimName": "shared-gpus"},
        {"name": "imex-channel", "resourceClaimTemplateName": template},
    ]
    return pod

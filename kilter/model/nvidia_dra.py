"""Views of NVIDIA's DRA ``ComputeDomain`` (``resource.nvidia.com/v1beta1``): only the fields kilter reads.

Follows ``api/nvidia.com/resource/v1beta1/computedomain.go`` of
kubernetes-sigs/dra-driver-nvidia-gpu (formerly NVIDIA/k8s-dra-driver-gpu).
A ComputeDomain makes the driver run one IMEX daemon per node that joins it
and create a ResourceClaimTemplate named ``spec.channel.resourceClaimTemplate.name``
in its namespace; a pod joins the domain by naming that template in its
``spec.resourceClaims``. The domain places nothing itself, which is why kilter
reads it (``kilter.gangs.compute_domains``).

Field names are the Go json tags; two of them are not plain camelCase
(``cliqueID``), so they are named explicitly. Unknown fields are ignored.
"""

from __future__ import annotations

import msgspec

from kilter.model.core_v1 import ObjectMeta

__all__ = [
    "ALLOCATION_ALL",
    "ALLOCATION_SINGLE",
    "COMPUTE_DOMAIN_GROUP",
    "COMPUTE_DOMAIN_KIND",
    "COMPUTE_DOMAIN_NODE_LABEL",
    "COMPUTE_DOMAIN_PLURAL",
    "COMPUTE_DOMAIN_VERSION",
    "ComputeDomain",
    "ComputeDomainChannelSpec",
    "ComputeDomainNode",
    "ComputeDomainResourceClaimTemplate",
    "ComputeDomainSpec",
    "ComputeDomainStatus",
]

COMPUTE_DOMAIN_GROUP = "resource.nvidia.com"
COMPUTE_DOMAIN_VERSION = "v1beta1"
COMPUTE_DOMAIN_KIND = "ComputeDomain"
COMPUTE_DOMAIN_PLURAL = "computedomains"

COMPUTE_DOMAIN_NODE_LABEL = "resource.nvidia.com/computeDomain"
"""Node label the driver sets, to the ComputeDomain's UID, while a domain is prepared on the node (the driver's own
``computeDomainLabelKey``): a node serves one ComputeDomain at a time."""

ALLOCATION_SINGLE = "Single"  # one IMEX channel per claim (the CRD's default)
ALLOCATION_ALL = "All"  # every channel of the IMEX domain


class ComputeDomainResourceClaimTemplate(msgspec.Struct, rename="camel", gc=False):
    name: str = ""


class ComputeDomainChannelSpec(msgspec.Struct, rename="camel", gc=False):
    resource_claim_template: ComputeDomainResourceClaimTemplate = msgspec.field(
        default_factory=ComputeDomainResourceClaimTemplate
    )
    allocation_mode: str = ""  # "" reads as ALLOCATION_SINGLE (the CRD defaults it)


class ComputeDomainSpec(msgspec.Struct, rename="camel", gc=False):
    """``numNodes`` is the intended number of nodes (IMEX daemons), 0 = not said; deprecated upstream but still
    the only size a ComputeDomain states. ``channel`` is a pointer upstream, so it may be null."""

    num_nodes: int = 0
    channel: ComputeDomainChannelSpec | None = None


class ComputeDomainNode(msgspec.Struct, rename="camel", gc=False):
    name: str = ""
    ip_address: str = ""
    clique_id: str = msgspec.field(default="", name="cliqueID")
    index: int = 0
    status: str = ""


class ComputeDomainStatus(msgspec.Struct, rename="camel", gc=False):
    status: str = ""  # "Ready" | "NotReady"
    nodes: tuple[ComputeDomainNode, ...] | None = None


class ComputeDomain(msgspec.Struct, rename="camel", gc=False):
    api_version: str = f"{COMPUTE_DOMAIN_GROUP}/{COMPUTE_DOMAIN_VERSION}"
    kind: str = COMPUTE_DOMAIN_KIND
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ComputeDomainSpec = msgspec.field(default_factory=ComputeDomainSpec)
    status: ComputeDomainStatus = msgspec.field(default_factory=ComputeDomainStatus)

    @property
    def claim_template(self) -> str:
        """The name of the ResourceClaimTemplate pods name to join the domain ("" when the spec has no channel)."""
        return self.spec.channel.resource_claim_template.name if self.spec.channel is not None else ""

"""How much of a peer's exchange kilter reads: every count and size bounded, each from what a real region publishes.

A peer's message is decoded in full before anything in it is used, so an
unbounded one costs whatever its sender likes: memory, and seconds of a
worker thread (a 50 MiB inventory once stalled a region for six). Each
bound below is the largest thing an honest region of the largest fleets
would publish, with room to spare, so it never cuts an honest inventory;
``publish.publishable`` holds this region's own to them, and ``wire``
refuses a message past any of them (``TooLarge``) before it is decoded
further. The numbers, and why, are in docs/pool.md ("Bounds"). Plain
numbers, no imports: the Configuration's ``pool`` section checks against
``MAX_REGIONS`` without loading gRPC.
"""

from __future__ import annotations

__all__ = [
    "MAX_CERTIFICATES",
    "MAX_CERTIFICATE_BYTES",
    "MAX_CLUSTER_QUEUES",
    "MAX_DOMAINS",
    "MAX_INVENTORY_BYTES",
    "MAX_LOCAL_QUEUES",
    "MAX_MESSAGE_BYTES",
    "MAX_REGIONS",
    "MAX_ROOMS",
    "MAX_SIGNATURE_BYTES",
]

MAX_REGIONS = 256
"""Regions in one pool, so inventories in one message and entries in one digest: a message carries at most one
inventory per region. A cloud has a few dozen regions; a pool of several clouds' regions is still far below."""

MAX_DOMAINS = 131_072
"""Scale-up domains of one region. A domain is at least one node and a region is one Kubernetes cluster: the
largest run so far has 130,000 nodes (GKE, 2025; upstream Kubernetes is tested to 5,000), which as 8-GPU nodes
is a million GPUs."""

MAX_ROOMS = 16_384
"""Distinct domain rooms one inventory lists (``DomainRoom.domains`` counts the domains with each): a room is
(platform, free GPUs, largest shape), and what its nodes' free GPUs can make of those is small: counted over
every way a domain's nodes can be free, RUBIN-ULTRA-NVL576 has 2,701, each of the five 72-GPU racks 838, an
8-GPU node 9, so every builtin platform at once at its worst fragmentation is 6,972. An idle or a full region
lists a handful, whatever its size."""

MAX_LOCAL_QUEUES = 16_384
"""LocalQueues one inventory names. A LocalQueue lives in a namespace, Kubernetes' scalability thresholds hold a
cluster to 10,000 namespaces, and a tenant's namespace has one or two."""

MAX_CLUSTER_QUEUES = 16_384
"""ClusterQueues whose headroom one inventory carries: each is fed by LocalQueues (one without any serves no
job the pool could send), so no more than those."""

MAX_INVENTORY_BYTES = 4 * 1024 * 1024
"""One serialized inventory. At every count bound with names of usual length (platforms of 20 characters,
ClusterQueues of 28, ``namespace/name`` keys of 38) an inventory is 2.2 MiB; names near their limits by the
thousand could go past this, and ``publishable`` then leaves queues out until it fits."""

MAX_CERTIFICATES = 4
"""Certificates an inventory's seal carries: its origin's, and up to three intermediates below the pool CA."""

MAX_CERTIFICATE_BYTES = 16 * 1024
"""One certificate, DER: an RSA-4096 certificate with a dozen names is under 3 KiB."""

MAX_SIGNATURE_BYTES = 1024
"""One signature: RSA-8192's is 1,024 bytes; ECDSA P-521's at most 139."""

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""One exchange message, either way: the gRPC listener's receive limit (``api.server.MAX_RECEIVE_BYTES``), which
holds the largest inventory with its seal and a full digest. A sender that holds more than fits sends the rest
in the next rounds (``wire.pack``); the receiver's digest keeps asking for it."""

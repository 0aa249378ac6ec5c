"""Which NVIDIA ComputeDomain a pod belongs to, and the domain's pods.

A pod joins a ComputeDomain by naming, in ``spec.resourceClaims``, the
ResourceClaimTemplate the domain's ``spec.channel.resourceClaimTemplate.name``
names, in the same namespace (the driver makes that template for the domain).
That membership is all kilter needs to treat the domain's pods as one gang
(``identity``) and to keep them in one clique (``cliques``). A pod naming a
template no ComputeDomain of its namespace names is in no domain.

Lookups go through the store's typed ComputeDomains (a cluster holds few)
and its index of pods by claim template, so a pod that names no template —
most pods — costs one empty-tuple test.
"""

from __future__ import annotations

from kilter.model.annotations import COMPUTE_DOMAIN_SHARES_CLIQUES, COMPUTE_DOMAIN_SPANS_CLIQUES, is_true
from kilter.model.core_v1 import Pod, PodSpec
from kilter.model.nvidia_dra import COMPUTE_DOMAIN_GROUP, COMPUTE_DOMAIN_KIND, ComputeDomain
from kilter.state.store import ClusterStore
from kilter.topology.fleet import ENDED_PHASES

__all__ = ["SOURCE", "all_domains", "domain_of", "members", "named", "shares_cliques", "spans_cliques", "templates"]

SOURCE = f"{COMPUTE_DOMAIN_GROUP}/{COMPUTE_DOMAIN_KIND}"
"""``GangId.source`` of a gang that is a ComputeDomain's pods."""


def templates(spec: PodSpec) -> frozenset[str]:
    """The ResourceClaimTemplates a pod's claims are made from (empty for a pod without DRA claims)."""
    if not spec.resource_claims:
        return frozenset()
    return frozenset(c.resource_claim_template_name for c in spec.resource_claims if c.resource_claim_template_name)


def all_domains(store: ClusterStore) -> list[ComputeDomain]:
    """The ComputeDomains of the current state, by namespace and name."""
    return sorted(store.compute_domains(), key=lambda cd: (cd.metadata.namespace, cd.metadata.name))


def domain_of(store: ClusterStore, namespace: str, names: frozenset[str]) -> ComputeDomain | None:
    """The ComputeDomain of ``namespace`` whose claim template is one of ``names`` (``templates`` of a pod spec);
    None if none is.

    Two domains naming one template would be a misconfiguration the driver
    itself cannot serve; the first by name is taken, so the answer is the same
    on every replica.
    """
    if not names:
        return None
    found = [
        cd
        for cd in store.compute_domains()
        if cd.metadata.namespace == namespace and cd.claim_template and cd.claim_template in names
    ]
    return min(found, key=lambda cd: cd.metadata.name) if found else None


def named(store: ClusterStore, namespace: str, name: str) -> ComputeDomain | None:
    """The ComputeDomain ``namespace/name`` of the current state, if it holds one."""
    return next(
        (cd for cd in store.compute_domains() if (cd.metadata.namespace, cd.metadata.name) == (namespace, name)),
        None,
    )


def members(store: ClusterStore, cd: ComputeDomain) -> list[Pod]:
    """The domain's pods in the store that have not finished, by name."""
    if not cd.claim_template:
        return []
    found = store.pods_claiming(cd.metadata.namespace, cd.claim_template)
    return sorted((p for p in found if p.status.phase not in ENDED_PHASES), key=lambda p: p.metadata.name)


def spans_cliques(cd: ComputeDomain) -> bool:
    """The domain's owner lets its pods spread over several cliques (``COMPUTE_DOMAIN_SPANS_CLIQUES``)."""
    return is_true(cd.metadata.annotations.get(COMPUTE_DOMAIN_SPANS_CLIQUES))


def shares_cliques(cd: ComputeDomain) -> bool:
    """The domain may share a clique with another that allows it too (``COMPUTE_DOMAIN_SHARES_CLIQUES``)."""
    return is_true(cd.metadata.annotations.get(COMPUTE_DOMAIN_SHARES_CLIQUES))

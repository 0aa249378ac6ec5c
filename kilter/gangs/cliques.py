"""A ComputeDomain's gang in one NVLink clique, and two ComputeDomains never in one: the facts the rule reads.

The rule itself is ``kilter.topology.cliques`` (why, and what it narrows);
the planner applies it to any request that carries ``CliqueFacts``. Here
those facts are gathered from the state, for the pod that asks (a gang's
first pod, or a replacement of a running gang's):

* ``own``: where the domain's pods already run (bound, bound by kilter and
  not yet seen, or held by another gang's plan of the same domain);
* ``taken``: cliques holding a pod, a plan's slot, or the driver's node
  label (``resource.nvidia.com/computeDomain``) of another ComputeDomain the
  state holds — unless both domains carry
  ``kilter.dev/compute-domain-shares-cliques: "true"``;
* ``spans``: the domain carries ``kilter.dev/compute-domain-spans-cliques: "true"``.

A pod that joins no ComputeDomain gets its request back unchanged.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from kilter.gangs import compute_domains
from kilter.gangs.running import placed_domains
from kilter.model.core_v1 import Pod
from kilter.model.nvidia_dra import COMPUTE_DOMAIN_NODE_LABEL, ComputeDomain
from kilter.state.store import ClusterStore
from kilter.topology.cliques import CliqueFacts
from kilter.topology.fleet import Fleet
from kilter.topology.plan import GangRequest

__all__ = ["Cliques"]

Name = tuple[str, str]  # a ComputeDomain's (namespace, name)


class Cliques:
    """The rules, and which ComputeDomain each gang holding a reservation plans for (the gang book keeps one).

    A gang's pods need not be in the state (Volcano's session sends them), so the domain a reservation is for is
    remembered when its plan is asked for, not looked up from its pods later.
    """

    def __init__(self) -> None:
        self._owners: dict[str, Name] = {}  # gang key -> the ComputeDomain its plan was made for

    def constrain(self, store: ClusterStore, request: GangRequest, *, pod: Pod, gang: str) -> GangRequest:
        """``request`` (gang ``gang``, asked for by ``pod``) carrying what the rule reads of its ComputeDomain
        (module docstring), which the planner applies; unchanged for a pod in no ComputeDomain. A job's pod
        template serves as ``pod`` too (``Pod(metadata=..., spec=template.spec)`` with the job's namespace)."""
        cd = compute_domains.domain_of(store, pod.metadata.namespace, compute_domains.templates(pod.spec))
        if cd is None:
            return request
        fleet = store.fleet()
        own, taken = self._held(store, fleet, cd, gang)
        name = f"{cd.metadata.namespace}/{cd.metadata.name}"
        facts = CliqueFacts(name, frozenset(own), frozenset(taken), compute_domains.spans_cliques(cd))
        return replace(request, clique=facts)

    def _held(self, store: ClusterStore, fleet: Fleet, cd: ComputeDomain, gang: str) -> tuple[set[int], set[int]]:
        """The domains (fleet indices) ``cd``'s pods and other gangs' plans for it hold, and those that pods,
        plans and node labels of the ComputeDomains it must stay apart from hold; ``gang``'s plan is for ``cd``."""
        me = _name(cd)
        self._owners = {k: v for k, v in self._owners.items() if k != gang and store.is_reserved(k)}
        self._owners[gang] = me
        others = {_name(o): o for o in compute_domains.all_domains(store) if _name(o) != me and _apart(cd, o)}
        own = placed_domains(store, fleet, compute_domains.members(store, cd))
        taken: set[int] = set()
        for other in others.values():
            taken |= placed_domains(store, fleet, compute_domains.members(store, other))
        for owner, of in self._owners.items():
            where = {int(fleet.node_domain[h.node_index]) for h in store.reservation(owner)}
            if of == me and owner != gang:
                own |= where
            elif of in others:
                taken |= where
        taken |= _labelled(fleet, {o.metadata.uid for o in others.values() if o.metadata.uid})
        return own, taken


def _name(cd: ComputeDomain) -> Name:
    return cd.metadata.namespace, cd.metadata.name


def _apart(cd: ComputeDomain, other: ComputeDomain) -> bool:
    """The two domains must not share a clique: unless both allow it."""
    return not (compute_domains.shares_cliques(cd) and compute_domains.shares_cliques(other))


def _labelled(fleet: Fleet, uids: set[str]) -> set[int]:
    """The domains of nodes the driver labels as serving one of these ComputeDomains (by UID)."""
    if not uids or not fleet.has_label_key(COMPUTE_DOMAIN_NODE_LABEL):
        return set()
    codes, values = fleet.label_codes(COMPUTE_DOMAIN_NODE_LABEL)
    wanted = [code for value, code in values.items() if value in uids]
    return {int(d) for d in np.unique(fleet.node_domain[np.isin(codes, wanted)])} if wanted else set()

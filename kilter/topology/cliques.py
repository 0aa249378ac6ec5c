"""The ComputeDomain clique rules as the planner reads them: from what is known of a domain to a narrowed request.

An NVIDIA ComputeDomain runs an IMEX daemon on every node its pods land on,
and IMEX shares GPU memory only inside one NVLink clique; the domain itself
places nothing, so without a scheduler's help its pods spread over racks
(dra-driver-nvidia-gpu issue 804). Two ComputeDomains in one clique conflict
(issue 892). ``narrow`` turns both rules into what the planner reads:

* ``one_domain``: every pod of the gang in one scale-up domain — the clique,
  which the fleet keys on the whole ``nvidia.com/gpu.clique`` value
  ``<clusterUUID>.<cliqueId>``, so equal clique ids under two cluster UUIDs
  stay two domains. Unless the domain may span cliques.
* ``node_ok``: where the domain's pods already run (``CliqueFacts.own``), only
  that clique; never a clique another ComputeDomain holds
  (``CliqueFacts.taken``); never a node without a clique (GPU Feature
  Discovery drops the label when the fabric is unhealthy, and such a node
  cannot join an IMEX domain).

The facts are gathered from the cluster's objects elsewhere (``kilter.gangs``
reads ComputeDomains and their pods); this module only applies the rule, so
every caller of the planner applies the same one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from kilter._native import domains as native_domains
from kilter.topology.fleet import Fleet

if TYPE_CHECKING:
    from kilter.topology.plan import GangRequest

__all__ = ["CliqueFacts", "narrow"]


@dataclass(frozen=True)
class CliqueFacts:
    """What is known of the ComputeDomain a gang joins, in fleet domain indices."""

    domain: str  # the ComputeDomain's namespace/name, as the plan's reason names it
    own: frozenset[int] = frozenset()  # domains its pods (and other gangs' plans for it) hold
    taken: frozenset[int] = frozenset()  # domains held by ComputeDomains it must stay apart from
    spans: bool = False  # its owner lets its pods spread over several cliques


def narrow(fleet: Fleet, request: GangRequest) -> GangRequest:
    """``request`` held to its ComputeDomain's clique and away from the others' (module docstring): ``one_domain``
    unless the domain spans cliques, ``node_ok`` narrowed (an existing ``node_ok`` is kept and narrowed further),
    and ``note`` saying so. The facts are consumed (``clique`` becomes None), so narrowing twice is narrowing once.
    A request without ``clique`` comes back unchanged."""
    facts = request.clique
    if facts is None:
        return request
    detached = (fleet.bitmap.domain_flags & native_domains.DETACHED) != 0
    own = set() if facts.spans else set(facts.own) - {int(d) for d in np.flatnonzero(detached)}
    ok = ~detached[fleet.node_domain]
    if facts.taken:
        ok &= ~np.isin(fleet.node_domain, sorted(facts.taken))
    if own:
        ok &= np.isin(fleet.node_domain, sorted(own))
    if request.node_ok is not None:
        ok &= request.node_ok.astype(bool)
    note = _note(fleet, facts, own)
    note = f"{request.note}; {note}" if request.note else note
    return replace(
        request,
        clique=None,
        one_domain=request.one_domain or not facts.spans,
        node_ok=np.ascontiguousarray(ok, dtype=np.uint8),
        note=note,
    )


def _note(fleet: Fleet, facts: CliqueFacts, own: set[int]) -> str:
    """What the plan's reason says of the ComputeDomain's rules."""
    where = f"ComputeDomain {facts.domain}"
    parts = [f"{where}: any number of cliques" if facts.spans else f"{where}: one clique"]
    if own:
        parts.append("where its pods run: " + ", ".join(fleet.domain_ids[d] for d in sorted(own)))
    if facts.taken:
        n = len(facts.taken)
        parts.append(f"{n} clique{'s' if n != 1 else ''} of other ComputeDomains left out")
    return "; ".join(parts)

"""The ComputeDomain clique rules as the planner reads them: from what is known of a domain to a narrowed request.

An NVIDIA ComputeDomain runs an IMEX daemon on every node its pods land on,
and IMEX shares GPU memory only inside one NVLink clique; the domain itself
places nothing, so without a scheduler's help its pods spread over racks
(dra-driver-nvidia-gpu issue 804). Two ComputeDomains in one clique conflict
(issue 892). ``constraint`` turns both rules into what the planner reads
(``plan.with_clique`` applies it to a request):

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

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kilter._native import domains as native_domains
from kilter.topology.fleet import Fleet

__all__ = ["CliqueFacts", "Constraint", "constraint"]


@dataclass(frozen=True)
class CliqueFacts:
    """What is known of the ComputeDomain a gang joins, in fleet domain indices."""

    domain: str  # the ComputeDomain's namespace/name, as the plan's reason names it
    own: frozenset[int] = frozenset()  # domains its pods (and other gangs' plans for it) hold
    taken: frozenset[int] = frozenset()  # domains held by ComputeDomains it must stay apart from
    spans: bool = False  # its owner lets its pods spread over several cliques


@dataclass(frozen=True)
class Constraint:
    """What the rule asks of the planner for one gang of a ComputeDomain."""

    one_domain: bool  # every pod in one scale-up domain (the clique)
    node_ok: npt.NDArray[np.bool_]  # [node]: the gang may use the node
    note: str  # what the plan's reason says of the rule


def constraint(fleet: Fleet, facts: CliqueFacts) -> Constraint:
    """The rule for a gang of the ComputeDomain ``facts`` describe (module docstring): one clique unless it spans
    cliques, only the clique where its pods run, none another ComputeDomain holds, no node without a clique."""
    detached = (fleet.bitmap.domain_flags & native_domains.DETACHED) != 0
    own = set() if facts.spans else set(facts.own) - {int(d) for d in np.flatnonzero(detached)}
    ok = ~detached[fleet.node_domain]
    if facts.taken:
        ok &= ~np.isin(fleet.node_domain, sorted(facts.taken))
    if own:
        ok &= np.isin(fleet.node_domain, sorted(own))
    return Constraint(not facts.spans, ok, _note(fleet, facts, own))


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

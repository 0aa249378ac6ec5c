"""``--spare-nodes-per-domain``: the fleet default of ``kilter.dev/spare-nodes-per-domain``, one flag everywhere.

``kilter serve``, ``kilter plan``, ``kilter simulate`` and ``kubectl kilter``
take it, so that a plan asked for at the command line holds out the same
spares the server does. Its value obeys the annotation's rule
(``annotations.parse_spare_nodes``): a whole number from 0 to the most nodes
a domain of any multi-node platform of the catalog holds; objects that set
more win where they reach (``topology.spare_settings``).
"""

from __future__ import annotations

import argparse

from kilter.model.annotations import SPARE_NODES_PER_DOMAIN, SPARES_FOR_PREEMPTIBLE, parse_spare_nodes
from kilter.model.errors import InputError
from kilter.topology import spare_settings
from kilter.topology.catalog import BUILTIN, Catalog

__all__ = [
    "FLAG",
    "LEND_FLAG",
    "MAX_NODES_PER_DOMAIN",
    "add_spare_argument",
    "check_spare_nodes",
    "read_spare_nodes",
]

FLAG = "--spare-nodes-per-domain"
LEND_FLAG = "--spares-for-preemptible"
MAX_NODES_PER_DOMAIN = 4096
"""The most nodes a catalog platform's domain may have (``Platform.nodes_per_domain``): the flag's bound before the
catalog is known."""


def add_spare_argument(p: argparse._ActionsContainer, *, lend: bool = False) -> None:
    """Add the flag to a parser or an argument group; ``lend``: ``--spares-for-preemptible`` too (``kilter serve``,
    whose gang book knows which gangs run where, and so whose pods are preemptible)."""
    p.add_argument(
        FLAG,
        default="0",
        metavar="N",
        help="healthy, wholly free nodes each scale-up domain keeps out of new gang plans for repairs of running "
        f"gangs, where no ResourceFlavor, ClusterQueue or Cohort annotation {SPARE_NODES_PER_DOMAIN} asks more "
        "(default 0)",
    )
    if lend:
        p.add_argument(
            LEND_FLAG,
            action="store_true",
            help="lend each domain's spare nodes to pods of lower priority than every gang running there, which a "
            f'repair there preempts to take the node back, where no annotation {SPARES_FOR_PREEMPTIBLE}: "false" '
            "reaches the domain (default: spares stay idle)",
        )


def read_spare_nodes(raw: str, catalog: Catalog | None = None) -> int:
    """The flag's count; ``InputError`` (exit 2, one line) unless a whole number within the largest multi-node
    domain of ``catalog`` (None: only within ``MAX_NODES_PER_DOMAIN``; ``check_spare_nodes`` later)."""
    count = parse_spare_nodes(raw, limit=MAX_NODES_PER_DOMAIN, what=FLAG)
    return count if catalog is None else check_spare_nodes(count, catalog)


def check_spare_nodes(count: int, catalog: Catalog | None = None) -> int:
    """``count`` if no more than the largest multi-node domain of ``catalog`` holds, else ``InputError``."""
    limit = spare_settings.catalog_limit(catalog or Catalog(BUILTIN))
    if not 0 <= count <= limit:
        raise InputError(f"{FLAG} must be a whole number from 0 to {limit}, got {count}")
    return count

"""Hardware the catalog does not know, said once per name or product however many nodes carry it.

A rack of an unknown GPU is dozens of nodes, and a line per node (with the
whole catalog in each) buried the one thing to do: describe the hardware in
a platforms file. Two cases, both the fleet model's and ``kilter fleet
validate``'s, in the same words:

* a node labelled ``kilter.dev/platform`` with a name no catalog entry or
  alias has: it is left out;
* a node whose product label no catalog platform matches: it is read as its
  vendor's generic platform, each node its own scale-up domain, so a
  rack-scale product's domain labels (an NVLink clique) are not read, and
  its GPUs per node are no shape to judge it by.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kilter.model.errors import UnknownPlatform
from kilter.topology.catalog import PLATFORM_LABEL, Catalog, Platform

__all__ = ["UnknownGroup", "UnknownHardware"]

HINT = "describe it in a platforms file, --platforms"


@dataclass
class UnknownGroup:
    """The nodes of one unknown name or product, what they are (``label``: ``key=value``) and whether any carries
    a scale-up domain label kilter therefore does not read."""

    kind: str  # unknown-platform, unknown-product
    label: str
    reading: str  # what kilter does with them
    nodes: list[str] = field(default_factory=list)
    domained: bool = False

    @property
    def message(self) -> str:
        count = "1 node" if len(self.nodes) == 1 else f"{len(self.nodes)} nodes"
        if self.kind == "unknown-platform":
            return f"{count} labelled {self.label}: {self.reading}; left out ({HINT})"
        lost = "; their scale-up domain labels are not read" if self.domained else ""
        return f"{count} report {self.label}, which no catalog platform matches: {self.reading}{lost} ({HINT})"


class UnknownHardware:
    """Collects the unknown names and products of one reading of the nodes (module docstring)."""

    def __init__(self, catalog: Catalog) -> None:
        self._domain_keys = {k for p in catalog.platforms for k in p.domain_label_keys}
        self._groups: dict[tuple[str, str], UnknownGroup] = {}

    def named(self, node: str, exc: UnknownPlatform) -> None:
        """``node`` is labelled with a platform name no catalog entry or alias has."""
        label = f"{PLATFORM_LABEL}={exc.name}"
        group = self._groups.setdefault(("unknown-platform", label), UnknownGroup("unknown-platform", label, str(exc)))
        group.nodes.append(node)

    def fell_back(self, node: str, labels: Mapping[str, str], platform: Platform) -> bool:
        """Whether ``node``, read as ``platform``, is a product the catalog does not know: read as its vendor's
        generic platform while it names a product (noted, with whether it carries a domain label)."""
        if not platform.fallback:
            return False
        found = next((f"{k}={labels[k]}" for k in platform.product_label_keys if labels.get(k)), None)
        if found is None:
            return False
        reading = f"read as {platform.name}, each node its own scale-up domain"
        group = self._groups.setdefault(("unknown-product", found), UnknownGroup("unknown-product", found, reading))
        group.nodes.append(node)
        group.domained = group.domained or any(k in labels for k in self._domain_keys)
        return True

    def groups(self) -> list[UnknownGroup]:
        return [self._groups[key] for key in sorted(self._groups)]

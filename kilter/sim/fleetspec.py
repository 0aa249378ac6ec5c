"""The fleet a simulation runs on, from a few lines of YAML.

``{platforms: [{platform: GB200-NVL72, domains: 64, domainsPerBlock: 8,
unhealthyNodes: 6}, {platform: MI355X, nodes: 128}]}``: racks for
multi-node platforms, nodes for the others, blocks of ``domainsPerBlock``
domains under one leaf (8 by default), ``blocksPerSpine`` leaves under one
spine (4 by default), and ``unhealthyNodes`` cordoned or NotReady at
random (seeded). The fleet is generated as the Node objects a real cluster
would show and read by the same ``build_fleet`` the servers use, so the
simulated fleet is exactly what kilter would see.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from kilter.model.core_v1 import Node
from kilter.model.errors import InputError
from kilter.model.kueue import Topology
from kilter.topology import fleetgen
from kilter.topology.catalog import BUILTIN, Catalog
from kilter.topology.fleet import Fleet, build_fleet

__all__ = ["fleet_from_objects", "fleet_from_spec", "parse_spec"]

_KEYS = {
    "platform": "platform",
    "domains": "domains",
    "nodes": "nodes",
    "domainsPerBlock": "domains_per_block",
    "blocksPerSpine": "blocks_per_spine",
    "unhealthyNodes": "unhealthy_nodes",
}
MAX_NODES = 200_000
DEFAULT_BLOCKS_PER_SPINE = 4  # every node needs every level's label, or Kueue and kilter ignore it


def parse_spec(doc: Any, *, seed: int, catalog: Catalog | None = None) -> fleetgen.FleetSpec:
    """The fleet spec of a ``{platforms: [...]}`` document; every mistake is an InputError naming the field."""
    catalog = catalog or Catalog(BUILTIN)
    if not isinstance(doc, Mapping) or not isinstance(doc.get("platforms"), list) or not doc["platforms"]:
        raise InputError("a fleet file needs a non-empty list under 'platforms'")
    pools = []
    total = 0
    for i, raw in enumerate(doc["platforms"]):
        where = f"platforms[{i}]"
        if not isinstance(raw, Mapping):
            raise InputError(f"{where}: expected a mapping")
        unknown = sorted(set(raw) - set(_KEYS))
        if unknown:
            raise InputError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(_KEYS)})")
        name = raw.get("platform")
        if not isinstance(name, str):
            raise InputError(f"{where}.platform: expected a platform name")
        platform = catalog.get(name)
        args: dict[str, Any] = {
            "platform": platform.name,
            "prefix": f"{platform.name.lower()}-{i}",
            "blocks_per_spine": DEFAULT_BLOCKS_PER_SPINE,
        }
        for key, attr in _KEYS.items():
            if key == "platform" or key not in raw:
                continue
            value = raw[key]
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InputError(f"{where}.{key}: expected a whole number >= 0, got {value!r}")
            args[attr] = value
        size = args.get("domains", 0) if platform.is_multi_node else args.get("nodes", 0)
        if size <= 0:
            need = "domains" if platform.is_multi_node else "nodes"
            raise InputError(f"{where}: {platform.name} needs '{need}' > 0")
        for attr, key in (("domains_per_block", "domainsPerBlock"), ("blocks_per_spine", "blocksPerSpine")):
            if args.get(attr, 1) < 1:
                raise InputError(f"{where}.{key}: must be at least 1")
        total += size * (platform.nodes_per_domain if platform.is_multi_node else 1)
        pools.append(fleetgen.PoolSpec(**args))
    if total > MAX_NODES:
        raise InputError(f"the fleet has {total} nodes; the simulator takes at most {MAX_NODES}")
    return fleetgen.FleetSpec(tuple(pools), seed=seed)


def fleet_from_objects(objects: Iterable[Mapping[str, Any]], catalog: Catalog | None = None) -> Fleet:
    """The idle fleet of these Node and Topology objects (anything else, bound pods included, is left out)."""
    objects = list(objects)
    nodes = [msgspec.convert(o, Node) for o in objects if o.get("kind") == "Node"]
    topologies = [msgspec.convert(o, Topology) for o in objects if o.get("kind") == "Topology"]
    return build_fleet(nodes, catalog=catalog, topologies=topologies)


def fleet_from_spec(spec: fleetgen.FleetSpec, catalog: Catalog | None = None) -> Fleet:
    """The idle fleet of this spec, as ``build_fleet`` reads its generated Nodes."""
    nodes, _ = fleetgen.generate(spec, catalog)
    return fleet_from_objects([*nodes, fleetgen.topology_object()], catalog)

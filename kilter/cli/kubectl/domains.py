"""``kubectl kilter domains``: per scale-up domain its health, free GPUs, spares, largest gang shape and gangs.

The rows are ``gangs.inventory.take``'s, the same answer the gRPC
``Inventory`` gives; ``--map`` draws them as a rack map (``rackmap``). Each
row also names its unusable nodes and why (``Fleet.unusable_reason``: cordoned,
not Ready, a health signal), in ``-o wide``, JSON and YAML.
"""

from __future__ import annotations

import argparse
from typing import Any

from kilter.cli.kubectl import output, rackmap
from kilter.cli.kubectl.source import Cluster
from kilter.gangs.inventory import DomainInventory, take
from kilter.topology.fleet import Fleet

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "domains",
        parents=[common],
        help="per scale-up domain: health, free GPUs, spares, largest gang shape, gangs; --map draws racks",
        description="Every scale-up domain (cluster-scoped: -n is ignored): platform, block, nodes healthy/total, "
        "GPUs free/total, spares, the largest gang shape it takes now, and the gangs bound there. DOMAIN is the "
        "domain's short name (its id if short, else the shortest prefix of it no other domain shares; -o wide "
        "shows the full id): kilter maintenance plan --domains takes it, the full id, or any unique prefix.",
    )
    p.add_argument("--platform", help="only this platform (catalog name or alias)")
    p.add_argument("--block", help="only domains under this block (its path, or a prefix of it)")
    p.add_argument("--map", action="store_true", help="draw a rack map: one cell per tray")
    p.add_argument("--page", type=int, default=1, metavar="N", help="with --map: show page N (32 racks a page)")
    p.set_defaults(view=run)


def unusable_by_domain(fleet: Fleet) -> dict[str, list[tuple[str, str]]]:
    """Each domain's unusable nodes (name, reason), in name order; domains with none are left out."""
    out: dict[str, list[tuple[str, str]]] = {}
    for name, why in fleet.unusable.items():
        out.setdefault(fleet.domain_of_node(fleet.node_index[name]), []).append((name, why))
    return out


def _item(d: DomainInventory, unusable: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "domain": d.domain,
        "detached": d.detached,
        "platform": d.platform,
        "block": d.block or None,
        "nodesHealthy": d.nodes_healthy,
        "nodesTotal": d.nodes_total,
        "gpusFree": d.gpus_free,
        "gpusTotal": d.gpus_total,
        "spares": d.spares,
        "sparesUsed": d.spares_used,
        "largestShape": {"pods": d.largest_pods, "gpusPerPod": d.largest_gpus_per_pod},
        "gangs": [{"gang": g.key, "pods": g.pods, "gpus": g.gpus} for g in d.gangs],
        "trays": list(d.trays),
        "unusableNodes": [{"node": n, "reason": why} for n, why in unusable],
    }


def run(args: argparse.Namespace, cluster: Cluster) -> output.Answer:
    inventory = take(cluster.store, platform=args.platform, block=args.block)
    unusable = unusable_by_domain(cluster.store.fleet())
    data = {
        "generation": inventory.generation,
        "domains": [_item(d, unusable.get(d.domain, [])) for d in inventory.domains],
    }
    if args.map and args.output in ("table", "wide"):
        fleet = cluster.store.fleet()
        rows = rackmap.rack_rows(fleet, inventory.domains, rackmap.planned_nodes(cluster.store))
        return output.Answer(0, rackmap.render_map(rows, page=args.page))
    columns: output.Columns = (
        ("DOMAIN", False),
        ("PLATFORM", False),
        ("BLOCK", False),
        ("NODES", False),
        ("GPUS FREE", False),
        ("SPARES", False),
        ("LARGEST", False),
        ("GANGS", False),
        ("FIRST NODE", True),
        ("UNUSABLE", True),
    )
    fleet = cluster.store.fleet()
    starts = fleet.bitmap.domain_node_start
    index = {d: i for i, d in enumerate(fleet.domain_ids)}
    table_rows = [
        (
            d.domain if args.output == "wide" else fleet.domain_name(d.domain),
            d.platform,
            d.block or "-",
            f"{d.nodes_healthy}/{d.nodes_total}",
            f"{d.gpus_free}/{d.gpus_total}",
            f"{d.spares}+{d.spares_used}" if d.spares_used else d.spares,
            f"{d.largest_pods}x{d.largest_gpus_per_pod}" if d.largest_pods else "-",
            ",".join(g.key for g in d.gangs) or "-",
            fleet.node_names[int(starts[index[d.domain]])],
            "; ".join(f"{n}: {why}" for n, why in unusable.get(d.domain, [])) or "-",
        )
        for d in inventory.domains
    ]
    hint = ""  # on stderr, so the table stays a table
    if args.output == "table" and not args.no_headers and table_rows:
        hint = f"kilter maintenance plan --domains takes a DOMAIN as shown (e.g. {table_rows[0][0]}), an id or a prefix"
    return output.Answer(0, output.emit(args, data, output.table(args, columns, table_rows)), hint)

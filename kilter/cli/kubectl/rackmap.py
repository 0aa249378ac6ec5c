"""The terminal rack map of ``kubectl kilter domains --map``: one row per rack, one cell per tray.

A row is the rack's name, its cells and its free/total GPUs; a GB200 NVL72
rack of 18 trays fits in well under 80 columns, so 32 racks are one screen.
Cells: ``.`` free, ``+`` partly used, ``#`` busy, ``x`` failed (unusable),
``s`` spare, ``p`` planned (a node kilter's plan records hold for a gang not
bound there yet). A domain of several racks (NVL576) is cut into its racks,
a row each. More rows than ``PAGE_ROWS`` are paged: ``--page N`` shows page N
and the footer says how many there are.

Planned cells, read from the cluster's objects: the ``kilter.dev/plan``
records on Workloads, PodGroups and pods (``gangs.records``, decoded but not
verified: the plugin holds no plan key), less the nodes where that gang
already has a pod bound. A running kilter knows more (its in-memory plans);
the map shows what the cluster records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kilter.gangs import records
from kilter.gangs.identity import key_of
from kilter.gangs.inventory import DomainInventory
from kilter.state.cluster import KUEUE
from kilter.state.store import ClusterStore
from kilter.topology.fleet import Fleet

__all__ = ["CELLS", "PAGE_ROWS", "planned_nodes", "rack_rows", "render_map"]

CELLS = {"free": ".", "partial": "+", "busy": "#", "failed": "x", "spare": "s", "planned": "p"}
PAGE_ROWS = 32
VOLCANO = "scheduling.volcano.sh"


def _record_of(obj: Mapping[str, Any]) -> records.PlanRecord | None:
    meta = obj.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(records.PLAN_ANNOTATION)
    where = f"{obj.get('kind')} {meta.get('namespace')}/{meta.get('name')}"
    return records.decode(raw, where=where) if isinstance(raw, str) else None


def planned_nodes(store: ClusterStore) -> set[str]:
    """Nodes held by recorded plans for pods of their gang not bound there yet."""
    state = store.state()
    found: dict[str, set[str]] = {}
    for obj in (*state.raw.of(KUEUE, "Workload"), *state.raw.of(VOLCANO, "PodGroup")):
        record = _record_of(obj)
        if record is not None:
            found.setdefault(record.gang, set()).update(n for n, _ in record.slots)
    bound: dict[str, set[str]] = {}
    for pod in store.pods():
        raw = pod.metadata.annotations.get(records.PLAN_ANNOTATION)
        if raw is not None and not pod.spec.node_name:
            record = records.decode(raw, where=f"pod {pod.metadata.namespace}/{pod.metadata.name}")
            if record is not None:
                found.setdefault(record.gang, set()).update(n for n, _ in record.slots)
    if not found:
        return set()
    for pod in store.pods():
        key = key_of(pod) if pod.spec.node_name else None
        if key is not None and key.format() in found:
            bound.setdefault(key.format(), set()).add(pod.spec.node_name)
    return {n for gang, nodes in found.items() for n in nodes - bound.get(gang, set())}


def rack_rows(fleet: Fleet, domains: Iterable[DomainInventory], planned: set[str]) -> list[tuple[str, str, int, int]]:
    """(rack name, cells, free GPUs, total GPUs) per rack of the given domains, by rack name (a one-node domain is
    named by its node)."""
    index = {d: i for i, d in enumerate(fleet.domain_ids)}
    starts = fleet.bitmap.domain_node_start
    counts = fleet.bitmap.node_gpu_counts
    free = fleet.bitmap.node_gpu_counts - fleet.bitmap.node_used_gpus
    usable = fleet.bitmap.node_usable_flags
    rows = []
    for inv in domains:
        d = index[inv.domain]
        first = int(starts[d])
        platform = fleet.platforms[int(fleet.bitmap.domain_platforms[d])]
        per_rack = max(1, platform.nodes_per_domain // max(1, platform.racks_per_domain))
        for r in range(0, len(inv.trays), per_rack):
            nodes = range(first + r, first + min(r + per_rack, len(inv.trays)))
            cells = "".join(
                CELLS["planned"]
                if fleet.node_names[n] in planned and inv.trays[n - first] in ("free", "partial")
                else CELLS[inv.trays[n - first]]
                for n in nodes
            )
            first_name = fleet.node_names[nodes[0]]
            name = first_name.rsplit("-", 1)[0] if len(nodes) > 1 else first_name
            gpus_free = sum(int(free[n]) for n in nodes if usable[n])
            rows.append((name, cells, gpus_free, sum(int(counts[n]) for n in nodes)))
    rows.sort(key=lambda row: row[0])
    return rows


def render_map(rows: Sequence[tuple[str, str, int, int]], *, page: int) -> str:
    """One page of the map (1-based) with a legend; the footer names the other pages."""
    pages = max(1, -(-len(rows) // PAGE_ROWS))
    page = min(max(page, 1), pages)
    shown = rows[(page - 1) * PAGE_ROWS : page * PAGE_ROWS]
    width = max((len(r[0]) for r in shown), default=4)
    cells = max((len(r[1]) for r in shown), default=0)
    lines = [f"{'RACK'.ljust(width)}  {'TRAYS'.ljust(cells)}  FREE/GPUS"]
    lines += [f"{name.ljust(width)}  {c.ljust(cells)}  {f}/{t}" for name, c, f, t in shown]
    legend = "  ".join(f"{ch} {state}" for state, ch in CELLS.items())
    lines.append(legend)
    if pages > 1:
        lines.append(f"page {page}/{pages} ({len(rows)} racks; --page N for another)")
    return "\n".join(lines) + "\n"

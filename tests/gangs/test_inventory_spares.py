"""Spare nodes in the inventory: each domain's held count and used places, and its "spare" tray cells."""

from __future__ import annotations

from typing import Any

from kilter.gangs import inventory
from kilter.state.store import ClusterStore
from tests.extenders.conftest import pod_json
from tests.topology.builders import CLIQUE, node, rack

KEY = "kilter.dev/spare-nodes-per-domain"


def flavor(count: str) -> dict[str, Any]:
    meta = {"name": "gb200", "annotations": {KEY: count}}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": meta, "spec": {}}


def test_each_domain_shows_its_spares_held_and_used_and_its_spare_cells() -> None:
    # rack-a: 4 trays, t00..t02 busy: 1 idle tray held of 2, so 1 place used. rack-b: 4 idle trays, t02 and t03 held.
    store = ClusterStore()
    busy = [pod_json(f"p{t}", 4, node=f"rack-a-t{t:02d}") for t in range(3)]
    store.replace([*rack("rack-a", 4), *rack("rack-b", 4), *busy, flavor("2")])
    inv = inventory.take(store)
    rows = {r.domain: r for r in inv.domains}
    assert (rows["rack-a"].spares, rows["rack-a"].spares_used) == (1, 1)
    assert rows["rack-a"].trays == ("busy", "busy", "busy", "spare")
    assert (rows["rack-b"].spares, rows["rack-b"].spares_used) == (2, 0)
    assert rows["rack-b"].trays == ("free", "free", "spare", "spare")


def test_without_a_setting_no_cell_is_spare() -> None:
    store = ClusterStore()
    store.replace([*rack("rack-a", 4), node("lone", labels={CLIQUE: "x"}, cordoned=True)])
    inv = inventory.take(store)
    assert all(r.spares == 0 and r.spares_used == 0 and "spare" not in r.trays for r in inv.domains)

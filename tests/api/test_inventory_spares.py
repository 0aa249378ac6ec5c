"""The gRPC Inventory over loopback carries each domain's spare nodes (``kilter.gangs.inventory``)."""

from __future__ import annotations

from pathlib import Path

from kilter.api import placement_pb2 as pb
from tests.api.serving import serving
from tests.extenders.conftest import cluster_objects
from tests.gangs.test_inventory_spares import flavor


def test_the_grpc_inventory_carries_the_spares(tmp_path: Path) -> None:
    # The extender tests' cluster: r1 (r1-t05 cordoned), r2 (r2-t00 busy, r2-t01 half): 2 spares each, t16 and t17.
    with serving(tmp_path, objects=[*cluster_objects(), flavor("2")]) as s:
        answer = s.stub().Inventory(pb.InventoryRequest(platform="gb200-nvl72"), timeout=10)
        got = {
            d.domain: (d.spares, d.spares_used, [i for i, c in enumerate(d.trays) if c == "spare"])
            for d in answer.domains
        }
        assert got == {"r1": (2, 0, [16, 17]), "r2": (2, 0, [16, 17])}

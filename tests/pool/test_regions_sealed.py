"""Three regions as ``kilter serve`` processes over mutual TLS on 127.0.0.1, each with its own certificate from one
pool CA (``tests.pool.regions`` with ``tls``): sealed inventories are exchanged, a gang is dispatched on them, and
a peer with a valid certificate (the test, as ap-south) cannot make eu-west take its word for us-east."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest

from kilter.api import pool_pb2 as pb
from kilter.pool.authorship import Sealer
from kilter.pool.exchange import EXCHANGE
from kilter.pool.identity import PoolFiles
from kilter.pool.inventory import DomainRoom, RegionInventory
from kilter.pool.wire import sealed_message
from tests.pool.certs import dns_name, root
from tests.pool.regions import RACKS, TTL_S, Pool, regions_running, until

FORGED = "kilter_pool_inventories_forged_total"


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    certs = tmp_path_factory.mktemp("certs")
    ca = root(certs / "ca")
    tls = {name: (*ca.issue(certs / name, [dns_name(name)]), ca.path) for name in RACKS}
    with regions_running(tmp_path_factory.mktemp, tls=tls) as running:
        yield running


def test_sealed_inventories_are_exchanged_and_a_gang_runs_where_it_takes_the_fewest_domains(pool: Pool) -> None:
    until(lambda: all(pool.fresh_at(r, o) for r in RACKS for o in RACKS), "every region hears every region")
    assert all(pool.regions[r].metrics().get((FORGED, ""), 0) == 0 for r in RACKS)
    pool.submit("big", 16)
    until(lambda: pool.cluster_of("big") is not None, "big is admitted", step=pool.sync)
    assert pool.cluster_of("big") == "us-east"
    pool.check_invariants()


def test_a_peer_with_a_valid_certificate_cannot_write_another_region_s_inventory(pool: Pool) -> None:
    west, south = pool.regions["eu-west"], pool.regions["ap-south"]
    assert south.tls is not None
    until(lambda: pool.fresh_at("eu-west", "us-east"), "eu-west hears us-east")
    now = time.time()
    ahead = RegionInventory("us-east", int((now + TTL_S - 0.5) * 1000), 0.0, (DomainRoom("GB200-NVL72", 72, 18, 4),))
    forged = sealed_message(Sealer(PoolFiles(*south.tls)).seal(ahead))
    cert, key, ca = (p.read_bytes() for p in south.tls)  # ap-south's own certificate: the handshake passes
    options = [("grpc.ssl_target_name_override", dns_name("eu-west"))]
    target = f"{west.address}:{west.grpc}"
    with grpc.secure_channel(target, grpc.ssl_channel_credentials(ca, key, cert), options) as to_west:
        request = pb.ExchangeRequest(region="ap-south", inventories=[forged]).SerializeToString()
        to_west.unary_unary(EXCHANGE, None, None)(request, timeout=5)
    until(lambda: west.metrics().get((FORGED, ""), 0) >= 1, "eu-west counts the forgery")
    held_at_west = pool.generation_at("eu-west", "us-east")
    assert held_at_west < ahead.generation and held_at_west <= pool.generation_at("us-east", "us-east")
    assert pool.fresh_at("eu-west", "us-east"), "produced in 1970 would have aged it out at once"

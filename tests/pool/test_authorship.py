"""Inventories are taken only as written by their origin: regions over mutual TLS on 127.0.0.1, each with its own
certificate from one pool CA, one of them (ap-south) a faulty peer forging for the others."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from kilter.api import pool_pb2 as pb
from kilter.api.tls import ReloadingCredentials
from kilter.model.errors import InputError
from kilter.pool.authorship import CONTEXT, Authors, Sealer, sign
from kilter.pool.exchange import ExchangeCounts, Gossip, Peer, PoolServicer, Reader
from kilter.pool.identity import PoolFiles
from kilter.pool.inventory import DomainRoom, RegionInventory, Seal
from kilter.pool.peers import DEFAULT_TTL_S, PeerTable
from kilter.pool.settings import PeerSettings, PoolSettings
from kilter.pool.wire import sealed_message
from tests.pool.certs import Issuer, dns_name, root

REGIONS = ("eu-west", "us-east", "ap-south")


def inventory(region: str, generation: int, produced_at: float, free: int = 18) -> RegionInventory:
    return RegionInventory(region, generation, produced_at, (DomainRoom("gb200", free * 4, free, 4),), {"q": free * 4})


class Region:
    """One region over mutual TLS: its certificate (naming ``kilter.<region>.pool.test``), server and gossip."""

    def __init__(self, name: str, ca: Issuer, directory: Path) -> None:
        self.name = name
        self.cert, self.key = ca.issue(directory / name, [dns_name(name)])
        self.ca = ca
        self.files = PoolFiles(self.cert, self.key, ca.path)
        self.table = PeerTable(name, members=frozenset(REGIONS))
        self.counts = ExchangeCounts()
        names = {r: dns_name(r) for r in REGIONS if r != name}
        self.reader = Reader(Authors(name, names, self.files).judge)
        self.servicer = PoolServicer(self.table, lambda peer: True, self.counts, reader=self.reader)
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self.gossip: Gossip | None = None

    async def start(self) -> None:
        self.server = grpc.aio.server()
        self.servicer.add_to(self.server)
        credentials = ReloadingCredentials(self.cert, self.key, client_ca=self.ca.path).credentials
        self.port = self.server.add_secure_port("127.0.0.1:0", credentials)
        await self.server.start()

    def connect(self, peers: list[Region]) -> Gossip:
        def publish(table: PeerTable, now: float) -> RegionInventory | None:
            return inventory(self.name, table.next_generation(now), now) if self.name not in table.held else None

        links = [Peer(p.name, f"127.0.0.1:{p.port}", self.files, dns_name(p.name)) for p in peers]
        self.gossip = Gossip(
            self.table, links, publish, sealer=Sealer(self.files), reader=self.reader, counts=self.counts
        )
        return self.gossip

    async def stop(self) -> None:
        if self.gossip is not None:
            for peer in self.gossip.peers:
                await peer.close()
        if self.server is not None:
            await self.server.stop(None)


async def call_as(files: PoolFiles, callee: Region, inventories: list[pb.SealedInventory]) -> None:
    """One exchange with ``callee``, presenting ``files``' certificate (a peer the pool CA vouches for)."""
    peer = Peer("caller", f"127.0.0.1:{callee.port}", files, dns_name(callee.name))
    try:
        await peer.exchange(pb.ExchangeRequest(region="ap-south", inventories=inventories).SerializeToString(), 5)
    finally:
        await peer.close()


def run(test: Callable[[Path], Coroutine[Any, Any, None]], tmp_path: Path) -> None:
    asyncio.run(test(tmp_path))


async def _regions(tmp_path: Path) -> tuple[Issuer, dict[str, Region]]:
    ca = root(tmp_path / "ca")
    regions = {n: Region(n, ca, tmp_path) for n in REGIONS}
    for r in regions.values():
        await r.start()
    return ca, regions


Forgery = Callable[[RegionInventory, dict[str, Region], Issuer, Path], pb.SealedInventory]


def _sealed_by_the_forger(inv: RegionInventory, regions: dict[str, Region], ca: Issuer, d: Path) -> pb.SealedInventory:
    return sealed_message(Sealer(regions["ap-south"].files).seal(inv))


def _unsigned(inv: RegionInventory, regions: dict[str, Region], ca: Issuer, d: Path) -> pb.SealedInventory:
    return sealed_message(inv)


def _a_real_seal_over_other_bytes(
    inv: RegionInventory, regions: dict[str, Region], ca: Issuer, d: Path
) -> pb.SealedInventory:
    real = Sealer(regions[inv.origin].files).seal(RegionInventory(inv.origin, 1, time.time()))
    assert real.seal is not None
    return pb.SealedInventory(
        inventory=sealed_message(inv).inventory, signature=real.seal.signature, certificates=real.seal.certificates
    )


def _a_certificate_of_another_ca(
    inv: RegionInventory, regions: dict[str, Region], ca: Issuer, d: Path
) -> pb.SealedInventory:
    other = root(d / "other-ca", "not the pool's CA")
    cert, key = other.issue(d / "other", [dns_name(inv.origin)])
    return sealed_message(Sealer(PoolFiles(cert, key, other.path)).seal(inv))


def _a_certificate_the_forger_s_own_signed(
    inv: RegionInventory, regions: dict[str, Region], ca: Issuer, d: Path
) -> pb.SealedInventory:
    forger = regions["ap-south"]
    key = serialization.load_pem_private_key(forger.key.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    leaf = Issuer(x509.load_pem_x509_certificate(forger.cert.read_bytes()), key, forger.cert)  # not a CA
    cert, key_path = leaf.issue(d / "under-leaf", [dns_name(inv.origin)])  # its chain carries ap-south's
    return sealed_message(Sealer(PoolFiles(cert, key_path, ca.path)).seal(inv))
    return sealed_message(Sealer(PoolFiles(cert, key, ca.path)).seal(inv))


FORGERIES = {
    "sealed with the forger's own certificate": _sealed_by_the_forger,
    "unsigned": _unsigned,
    "the origin's real seal over other bytes": _a_real_seal_over_other_bytes,
    "a certificate naming the origin from another CA": _a_certificate_of_another_ca,
    "a certificate naming the origin issued by a region's certificate": _a_certificate_the_forger_s_own_signed,
}


@pytest.mark.parametrize("forge", FORGERIES.values(), ids=FORGERIES.keys())
def test_an_inventory_forged_for_another_region_is_dropped_and_that_region_is_still_heard(
    tmp_path: Path, forge: Forgery
) -> None:
    async def scenario(d: Path) -> None:
        ca, regions = await _regions(d)
        west, east, south = regions["eu-west"], regions["us-east"], regions["ap-south"]
        try:
            now = time.time()
            ahead = RegionInventory("us-east", int((now + DEFAULT_TTL_S - 0.5) * 1000), 0.0)  # produced in 1970
            await call_as(south.files, west, [forge(ahead, regions, ca, d)])
            assert "us-east" not in west.table.held and west.counts.forged == 1
            rows = pb.RegionInventory.FromString(sealed_message(ahead).inventory)
            rows.domains.add(platform="", gpus_free=-1, domains=1)  # a row that would be refused, if read
            me = south.files.current()
            data = rows.SerializeToString()
            broken = pb.SealedInventory(inventory=data, signature=sign(me.key, CONTEXT + data), certificates=me.chain)
            await call_as(south.files, west, [broken])
            assert west.counts.forged == 2, "judged on its seal, before its rows are read"
            assert await east.connect([west]).round() == 1
            honest = east.table.held["us-east"]
            assert west.table.held["us-east"].generation == honest.generation, "us-east's own update is taken"
            assert west.table.held["us-east"].domains == honest.domains
        finally:
            for r in regions.values():
                await r.stop()

    run(scenario, tmp_path)


@pytest.mark.parametrize("forge", [_sealed_by_the_forger, _unsigned], ids=["sealed by the forger", "unsigned"])
def test_a_region_takes_only_its_own_seal_s_word_for_its_own_generation(tmp_path: Path, forge: Forgery) -> None:
    """A forged copy of its own inventory moves nothing; a copy it sealed itself, which its peers relay back, lifts
    its next generation above it (what ``own_heard`` is for: a replica taking over, a clock set back)."""

    async def scenario(d: Path) -> None:
        ca, regions = await _regions(d)
        west, south = regions["eu-west"], regions["ap-south"]
        try:
            now = time.time()
            ahead = RegionInventory("eu-west", int((now + DEFAULT_TTL_S - 1) * 1000), now)
            await call_as(south.files, west, [forge(ahead, regions, ca, d)])
            assert west.table.own_heard == -1 and west.counts.forged == 1
            assert west.table.next_generation(now) == int(now * 1000), "still its own clock"
            before = Sealer(west.files).seal(RegionInventory("eu-west", int(now * 1000) + 5000, now))
            await call_as(south.files, west, [sealed_message(before)])
            assert west.table.own_heard == before.generation and west.counts.forged == 1
            assert west.table.next_generation(now) == before.generation + 1
        finally:
            for r in regions.values():
                await r.stop()

    run(scenario, tmp_path)


def test_a_relay_forwards_the_origin_s_bytes_and_cannot_alter_them(tmp_path: Path) -> None:
    async def scenario(d: Path) -> None:
        _, regions = await _regions(d)
        west, east, south = regions["eu-west"], regions["us-east"], regions["ap-south"]
        try:
            gossips = [west.connect([east]), east.connect([south]), south.connect([])]
            for _ in range(3):
                for g in gossips:
                    await g.round()
            relayed, original = west.table.held["ap-south"].seal, south.table.held["ap-south"].seal
            assert relayed is not None and original is not None
            assert (relayed.body, relayed.signature, relayed.certificates) == (
                original.body,
                original.signature,
                original.certificates,
            ), "byte for byte, through us-east"
            assert all(r.counts.forged == 0 for r in regions.values())

            kept = east.table.held["ap-south"]
            altered = RegionInventory("ap-south", kept.generation + 1, kept.produced_at, (), {"q": 4096})
            tampered = Seal(sealed_message(altered).inventory, original.signature, original.certificates)
            east.table.held["ap-south"] = RegionInventory(
                "ap-south", altered.generation, altered.produced_at, altered.domains, altered.headroom, seal=tampered
            )
            await gossips[0].round()  # eu-west calls us-east, which answers with what it holds newer
            assert west.counts.forged == 1
            assert west.table.held["ap-south"].generation == kept.generation, "the real one stays"
        finally:
            for r in regions.values():
                await r.stop()

    run(scenario, tmp_path)


def test_two_peers_known_by_one_certificate_name_are_refused_unless_the_pool_is_plaintext() -> None:
    peers = (PeerSettings("us-east", "10.0.0.1:9090"), PeerSettings("ap-south", "10.0.0.2:9090", (), "10.0.0.1"))
    with pytest.raises(InputError, match=r"pool.peers\[1\]: its certificate name 10.0.0.1 is also us-east's"):
        PoolSettings("eu-west", peers)
    assert PoolSettings("eu-west", peers, insecure=True).certificate_names() == {
        "us-east": "10.0.0.1",
        "ap-south": "10.0.0.1",
    }
    named = PoolSettings("eu-west", (PeerSettings("us-east", "[::1]:9090"), PeerSettings("ap-south", "h:1", (), "x")))
    assert named.certificate_names() == {"us-east": "::1", "ap-south": "x"}

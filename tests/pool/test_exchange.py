"""The inventory exchange over real gRPC sockets on 127.0.0.1: plaintext and mutual TLS, relays, refusals."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import grpc
import pytest

from kilter.api import pool_pb2 as pb
from kilter.api.tls import ReloadingCredentials
from kilter.pool.exchange import EXCHANGE, UNCHANGED, ExchangeCounts, Gossip, Peer, PoolServicer, Unchanged
from kilter.pool.inventory import DomainRoom, RegionInventory
from kilter.pool.peers import PeerTable
from kilter.pool.wire import sealed_message
from tests.extenders.conftest import make_certificates

REGIONS = ("eu-west", "us-east", "ap-south")
ROOMS = {"eu-west": 3, "us-east": 9, "ap-south": 18}


def own_inventory(region: str, generation: int, now: float) -> RegionInventory:
    pods = ROOMS[region]
    return RegionInventory(region, generation, now, (DomainRoom("gb200", pods * 4, pods, 4),), {"research": pods * 4})


class Region:
    """One region's exchange: a gRPC server on 127.0.0.1 and its gossip."""

    def __init__(self, name: str, counts: ExchangeCounts, trusted: Callable[[str], bool] = lambda peer: True) -> None:
        self.name = name
        self.table = PeerTable(name, members=frozenset(REGIONS))
        self.counts = counts
        self.servicer = PoolServicer(self.table, trusted, counts)
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self.gossip: Gossip | None = None

    async def start(self, credentials: grpc.ServerCredentials | None = None) -> None:
        self.server = grpc.aio.server()
        self.servicer.add_to(self.server)
        target = "127.0.0.1:0"
        if credentials is None:
            self.port = self.server.add_insecure_port(target)
        else:
            self.port = self.server.add_secure_port(target, credentials)
        await self.server.start()

    def connect(self, peers: list[Region], credentials: grpc.ChannelCredentials | None = None) -> None:
        def publish(table: PeerTable, now: float) -> RegionInventory | None:
            held = table.held.get(self.name)
            return own_inventory(self.name, table.next_generation(now), now) if held is None else None

        links = [Peer(p.name, f"127.0.0.1:{p.port}", credentials) for p in peers]
        self.gossip = Gossip(self.table, links, publish, call_timeout_s=5, counts=self.counts)

    async def stop(self) -> None:
        if self.gossip is not None:
            for peer in self.gossip.peers:
                await peer.close()
        if self.server is not None:
            await self.server.stop(None)


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


ServerCredentials = Callable[[], grpc.ServerCredentials]  # one per server: gRPC's dynamic credentials serve one


async def _line(credentials: tuple[ServerCredentials, grpc.ChannelCredentials] | None) -> list[Region]:
    """eu-west - us-east - ap-south: the ends have no link of their own."""
    regions = [Region(n, ExchangeCounts()) for n in REGIONS]
    for r in regions:
        await r.start(credentials[0]() if credentials else None)
    west, east, south = regions
    channel = credentials[1] if credentials else None
    west.connect([east], channel)
    east.connect([south], channel)
    south.connect([], channel)
    return regions


def test_a_region_without_a_direct_link_is_heard_through_a_third() -> None:
    async def scenario() -> None:
        regions = await _line(None)
        try:
            for _ in range(3):
                for r in regions:
                    assert r.gossip is not None
                    await r.gossip.round()
            for r in regions:
                assert set(r.table.held) == set(REGIONS), r.name
            west = regions[0]
            assert west.table.held["ap-south"].domains[0].largest_pods == 18, "relayed by us-east, unchanged"
            assert west.counts.bytes_sent > 0 and west.counts.bytes_received > 0
        finally:
            for r in regions:
                await r.stop()

    run(scenario)


def test_a_quiet_round_moves_only_digests() -> None:
    async def scenario() -> None:
        regions = await _line(None)
        try:
            for _ in range(3):
                for r in regions:
                    assert r.gossip is not None
                    await r.gossip.round()
            west = regions[0]
            assert west.gossip is not None
            before = west.counts.bytes_received
            accepted = west.table.accepted
            await west.gossip.round()
            assert west.table.accepted == accepted, "nothing new"
            assert west.counts.bytes_received - before < 120, "three digest entries, no inventory"
        finally:
            for r in regions:
                await r.stop()

    run(scenario)


def _mtls(directory: Path) -> tuple[ServerCredentials, grpc.ChannelCredentials, Path, Path, Path]:
    cert, key, ca = make_certificates(directory)

    def server() -> grpc.ServerCredentials:
        return ReloadingCredentials(cert, key, client_ca=ca).credentials

    channel = grpc.ssl_channel_credentials(ca.read_bytes(), key.read_bytes(), cert.read_bytes())
    return server, channel, cert, key, ca


def test_peers_converge_over_mutual_tls(tmp_path: Path) -> None:
    server, channel, *_ = _mtls(tmp_path)

    async def scenario() -> None:
        regions = await _line((server, channel))
        try:
            for _ in range(3):
                for r in regions:
                    assert r.gossip is not None
                    assert await r.gossip.round() == len(r.gossip.peers)
            assert all(set(r.table.held) == set(REGIONS) for r in regions)
        finally:
            for r in regions:
                await r.stop()

    run(scenario)


@pytest.mark.parametrize("client", ["none", "other CA"])
def test_mutual_tls_refuses_a_peer_without_the_pool_s_certificate(tmp_path: Path, client: str) -> None:
    server, _, _, _, ca = _mtls(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    other_cert, other_key, _ = make_certificates(other)
    if client == "none":
        channel = grpc.ssl_channel_credentials(ca.read_bytes())
    else:
        channel = grpc.ssl_channel_credentials(ca.read_bytes(), other_key.read_bytes(), other_cert.read_bytes())

    async def scenario() -> None:
        regions = await _line((server, channel))
        try:
            west = regions[0]
            assert west.gossip is not None
            assert await west.gossip.round() == 0
            assert set(regions[1].table.held) == set(), "the callee took nothing from it"
            assert west.counts.calls == {("us-east", "failed"): 1}
        finally:
            for r in regions:
                await r.stop()

    run(scenario)


async def _call(port: int, request: pb.ExchangeRequest) -> pb.ExchangeResponse:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        answer = await channel.unary_unary(EXCHANGE, None, None)(request.SerializeToString(), timeout=5)
        return pb.ExchangeResponse.FromString(answer)


def _origins(answer: pb.ExchangeResponse) -> list[str]:
    return [pb.RegionInventory.FromString(m.inventory).origin for m in answer.inventories]


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"origin": ""}, "inventories[1].origin"),
        ({"generation": -1}, "inventories[1].generation"),
        ({"produced_at": float("nan")}, "inventories[1].producedAt"),
        ({"domains": [pb.DomainRoom(platform="gb200", gpus_free=-4, domains=1)]}, "inventories[1].domains[0].gpusFree"),
        ({"domains": [pb.DomainRoom(platform="", gpus_free=4, domains=1)]}, "inventories[1].domains[0].platform"),
        ({"domains": [pb.DomainRoom(platform="gb200", gpus_free=4)]}, "inventories[1].domains[0].domains"),
        ({"origin": "x" * 300}, "inventories[1].origin"),
    ],
)
def test_a_malformed_inventory_is_refused_naming_its_field_and_nothing_held_is_lost(
    bad: dict[str, Any], field: str
) -> None:
    async def scenario() -> None:
        east = Region("us-east", ExchangeCounts())
        await east.start()
        try:
            east.table.publish(own_inventory("us-east", 5, 1000.0))
            good = sealed_message(own_inventory("eu-west", 7, 1000.0))
            inner = pb.RegionInventory(origin="ap-south", generation=3, produced_at=1000.0)
            for key, value in bad.items():
                if key == "domains":
                    inner.domains.extend(value)
                else:
                    setattr(inner, key, value)
            broken = pb.SealedInventory(inventory=inner.SerializeToString())
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await _call(east.port, pb.ExchangeRequest(region="eu-west", inventories=[good, broken]))
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert field in (caught.value.details() or "")
            assert set(east.table.held) == {"us-east"}, "a refused call takes nothing, not even its good part"
            assert east.counts.refused == 1
        finally:
            await east.stop()

    run(scenario)


def test_an_inventory_of_a_region_outside_the_pool_or_of_the_callee_itself_is_not_kept() -> None:
    async def scenario() -> None:
        east = Region("us-east", ExchangeCounts())
        await east.start()
        try:
            east.table.publish(own_inventory("us-east", 5, 1000.0))
            stranger = sealed_message(RegionInventory("mallory", 1, 1000.0))
            forged = sealed_message(own_inventory("us-east", 99, 1000.0))
            answer = await _call(east.port, pb.ExchangeRequest(region="mallory", inventories=[stranger, forged]))
            assert set(east.table.held) == {"us-east"} and east.table.held["us-east"].generation == 5
            assert east.table.strangers == 1 and east.counts.forged == 1
            assert east.table.next_generation(0.0) == 6, "an unsigned copy of its own moves nothing"
            assert _origins(answer) == ["us-east"]
        finally:
            await east.stop()

    run(scenario)


def test_an_untrusted_caller_is_refused() -> None:
    async def scenario() -> None:
        east = Region("us-east", ExchangeCounts(), trusted=lambda peer: False)
        await east.start()
        try:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await _call(east.port, pb.ExchangeRequest(region="eu-west"))
            assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
        finally:
            await east.stop()

    run(scenario)


def test_a_restarted_region_is_taken_up_again_above_what_peers_hold_of_it() -> None:
    async def scenario() -> None:
        regions = await _line(None)
        try:
            west, east, _ = regions
            for r in regions:
                assert r.gossip is not None
                await r.gossip.round()
            old = east.table.held["eu-west"].generation
            await west.stop()
            reborn = Region("eu-west", ExchangeCounts())
            await reborn.start()
            reborn.connect([east])
            assert reborn.gossip is not None
            await reborn.gossip.round()
            assert east.table.held["eu-west"].generation > old, "a restart publishes above the old generation"
            assert set(reborn.table.held) >= {"eu-west", "us-east"}
            await reborn.stop()
        finally:
            for r in regions[1:]:
                await r.stop()

    run(scenario)


def test_an_inventory_stamped_beyond_any_clock_is_dropped_and_cannot_shut_a_region_out() -> None:
    async def scenario() -> None:
        east = Region("us-east", ExchangeCounts())
        await east.start()
        try:
            now = time.time()
            east.table.publish(own_inventory("us-east", east.table.next_generation(now), now))
            forged_other = sealed_message(own_inventory("eu-west", 2**63 - 1, now))
            forged_own = sealed_message(own_inventory("us-east", 2**63 - 1, now))
            answer = await _call(
                east.port, pb.ExchangeRequest(region="eu-west", inventories=[forged_other, forged_own])
            )
            assert east.table.future == 1 and "eu-west" not in east.table.held
            assert east.counts.forged == 1, "its own, from anyone but itself, is not even looked at"
            assert east.table.next_generation(time.time()) < 2**62, "its own next generation is still its clock"
            assert _origins(answer) == ["us-east"]
            honest = sealed_message(own_inventory("eu-west", int(now * 1000), now))
            await _call(east.port, pb.ExchangeRequest(region="eu-west", inventories=[honest]))
            assert "eu-west" in east.table.held, "the real eu-west is still taken"
        finally:
            await east.stop()

    run(scenario)


def _gossip(answers: list[Any], *, leader: bool = True) -> tuple[Gossip, list[float]]:
    clock = [1000.0]
    table = PeerTable("eu-west", ttl_s=10)
    made = iter(answers)

    def publish(t: PeerTable, now: float) -> RegionInventory | Unchanged | None:
        answer = next(made)
        return own_inventory("eu-west", t.next_generation(now), now) if answer == "new" else answer

    return Gossip(table, [], publish, wall=lambda: clock[0], is_writer=lambda: leader), clock


def test_an_unchanged_state_renews_the_inventory_and_an_unreadable_one_lets_it_age_out() -> None:
    gossip, clock = _gossip(["new", UNCHANGED, UNCHANGED, None, None])
    gossip.refresh()
    first = gossip.table.held["eu-west"].generation
    clock[0] += 2
    gossip.refresh()
    assert gossip.table.held["eu-west"].generation == first, "young: not renewed"
    clock[0] += 4
    gossip.refresh()
    renewed = gossip.table.held["eu-west"]
    assert renewed.generation > first and renewed.produced_at == clock[0], "confirmed and half its TTL old"
    clock[0] += 6
    gossip.refresh()
    clock[0] += 6
    gossip.refresh()
    assert gossip.table.held["eu-west"] is renewed, "a state that cannot be read is never vouched for"
    assert "eu-west" in gossip.table.fresh(clock[0]), "its own is always there for itself"


def test_a_replica_that_does_not_lead_publishes_nothing() -> None:
    gossip, _ = _gossip(["new"], leader=False)
    gossip.refresh()
    assert gossip.table.held == {}

"""The pool's bounds over real gRPC sockets on 127.0.0.1: a message past any of them is refused and its sender
backed off, either way; what is read is read off the event loop; this region's own inventory keeps them."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import grpc
import pytest

from kilter.api import pool_pb2 as pb
from kilter.api.server import MAX_RECEIVE_BYTES
from kilter.pool import bounds
from kilter.pool.backoff import Backoff
from kilter.pool.exchange import EXCHANGE, POOL, ExchangeCounts, Gossip, Peer, PoolServicer, Reader
from kilter.pool.inventory import DomainRoom, RegionInventory, Seal
from kilter.pool.peers import PeerTable
from kilter.pool.publish import publishable
from kilter.pool.wire import body, encode, inventory, read, sealed_message

MEMBERS = frozenset({"eu-west", "us-east", "ap-south"})
LISTENER = [("grpc.max_receive_message_length", MAX_RECEIVE_BYTES)]  # as kilter serve's gRPC listener


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def sealed(inner: pb.RegionInventory, **seal: Any) -> pb.SealedInventory:
    return pb.SealedInventory(inventory=inner.SerializeToString(), **seal)


def inner(**fields: Any) -> pb.RegionInventory:
    return pb.RegionInventory(**{"origin": "ap-south", "generation": 3, "produced_at": time.time(), **fields})


def row(platform: str, domains: int = 1) -> pb.DomainRoom:
    return pb.DomainRoom(platform=platform, gpus_free=4, largest_pods=1, largest_gpus_per_pod=4, domains=domains)


OVER = {
    "257 inventories": (
        lambda: pb.ExchangeRequest(inventories=[sealed(pb.RegionInventory(origin=f"r{i}")) for i in range(257)]),
        "inventories: 257 inventories",
    ),
    "257 digest entries": (
        lambda: pb.ExchangeRequest(digest={f"r{i}": 1 for i in range(257)}),
        "digest: 257 regions",
    ),
    "16,385 rooms": (
        lambda: pb.ExchangeRequest(inventories=[sealed(inner(domains=[row(f"p{i}") for i in range(16_385)]))]),
        "inventories[0].domains: 16385 rows",
    ),
    "131,073 domains": (
        lambda: pb.ExchangeRequest(inventories=[sealed(inner(domains=[row("gb200", 131_072), row("gb300", 1)]))]),
        "inventories[0].domains: 131073 domains",
    ),
    "16,385 ClusterQueues": (
        lambda: pb.ExchangeRequest(inventories=[sealed(inner(headroom={f"cq-{i}": i for i in range(16_385)}))]),
        "inventories[0].headroom: 16385 ClusterQueues",
    ),
    "16,385 LocalQueues": (
        lambda: pb.ExchangeRequest(
            inventories=[sealed(inner(local_queues={f"ns/lq-{i}": "q" for i in range(16_385)}))]
        ),
        "inventories[0].localQueues: 16385 LocalQueues",
    ),
    "an inventory past 4 MiB": (
        lambda: pb.ExchangeRequest(inventories=[sealed(inner(origin="x" * (4 << 20)))]),
        "inventories[0].inventory: 4194320 bytes; at most 4194304",
    ),
    "a 1,025-byte signature": (
        lambda: pb.ExchangeRequest(inventories=[sealed(inner(), signature=bytes(1025))]),
        "inventories[0].signature: 1025 bytes",
    ),
    "5 certificates": (
        lambda: pb.ExchangeRequest(inventories=[sealed(inner(), certificates=[b"x"] * 5)]),
        "inventories[0].certificates: 5 certificates",
    ),
    "a 16 KiB + 1 certificate": (
        lambda: pb.ExchangeRequest(inventories=[sealed(inner(), certificates=[bytes(16 * 1024 + 1)])]),
        "inventories[0].certificates[0]: 16385 bytes",
    ),
}


class Callee:
    """A region's exchange served on 127.0.0.1 (plaintext), its clock in the test's hands."""

    def __init__(self) -> None:
        self.table = PeerTable("us-east", members=MEMBERS)
        self.counts = ExchangeCounts()
        self.clock = [time.time()]
        self.servicer = PoolServicer(
            self.table, lambda peer: True, self.counts, lambda: self.clock[0], backoff=Backoff(1.0, 30.0)
        )
        self.server = grpc.aio.server(options=LISTENER)
        self.servicer.add_to(self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    async def call(self, request: pb.ExchangeRequest) -> grpc.StatusCode:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{self.port}", options=LISTENER) as channel:
            try:
                await channel.unary_unary(EXCHANGE, None, None)(request.SerializeToString(), timeout=10)
            except grpc.aio.AioRpcError as exc:
                self.details = exc.details() or ""
                return exc.code()
        return grpc.StatusCode.OK


def _honest() -> pb.ExchangeRequest:
    return pb.ExchangeRequest(inventories=[sealed_message(RegionInventory("ap-south", 3, time.time()))])


@pytest.mark.parametrize(("request_of", "field"), OVER.values(), ids=OVER.keys())
def test_a_request_over_a_bound_is_refused_naming_it_and_its_caller_is_not_answered_for_a_while(
    request_of: Callable[[], pb.ExchangeRequest], field: str
) -> None:
    async def scenario() -> None:
        east = Callee()
        await east.server.start()
        try:
            assert await east.call(request_of()) == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert field in east.details
            assert (east.counts.over_bounds, east.counts.refused, east.table.held) == (1, 1, {})
            assert await east.call(_honest()) == grpc.StatusCode.RESOURCE_EXHAUSTED, "backed off"
            assert "not answered for 1.0s" in east.details and east.table.held == {}
            east.clock[0] += 1.0
            assert await east.call(_honest()) == grpc.StatusCode.OK
            assert set(east.table.held) == {"ap-south"} and east.counts.over_bounds == 1
        finally:
            await east.server.stop(None)

    run(scenario)


def test_only_an_inventory_that_will_be_kept_is_read_row_by_row() -> None:
    """The Python-level cost of a message (its rows and queues) is paid only for what is kept: an inventory older
    than the one held is skipped on its stamp, so a broken row in it cannot even be noticed."""

    async def scenario() -> None:
        east = Callee()
        await east.server.start()
        try:
            east.table.offer([RegionInventory("ap-south", 5, east.clock[0])])
            broken = [pb.DomainRoom(platform="gb200", gpus_free=-4, domains=1)]
            old = pb.ExchangeRequest(inventories=[sealed(inner(generation=4, domains=broken))])
            assert await east.call(old) == grpc.StatusCode.OK
            assert east.table.held["ap-south"].generation == 5
            new = pb.ExchangeRequest(inventories=[sealed(inner(generation=6, domains=broken))])
            assert await east.call(new) == grpc.StatusCode.INVALID_ARGUMENT
            assert "inventories[0].domains[0].gpusFree" in east.details
        finally:
            await east.server.stop(None)

    run(scenario)


class FakePeer:
    """A peer that answers every exchange with the same bytes, and counts the calls it gets."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.calls = 0
        self.server = grpc.aio.server()

        async def exchange(raw: bytes, context: Any) -> bytes:
            self.calls += 1
            return self.answer

        handler = grpc.unary_unary_rpc_method_handler(exchange)
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(POOL, {"Exchange": handler}),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")


ANSWERS = {
    "16,385 ClusterQueues": lambda: pb.ExchangeResponse(
        inventories=[sealed(inner(origin="ap-south", headroom={f"cq-{i}": 1 for i in range(16_385)}))]
    ).SerializeToString(),
    "a 9 MiB message": lambda: pb.ExchangeResponse(
        inventories=[pb.SealedInventory(inventory=bytes(9 << 20))]
    ).SerializeToString(),
}


@pytest.mark.parametrize("answer", ANSWERS.values(), ids=ANSWERS.keys())
def test_a_peer_answering_over_a_bound_is_counted_and_not_called_again_for_a_while(answer: Callable[[], bytes]) -> None:
    async def scenario() -> None:
        fake = FakePeer(answer())
        await fake.server.start()
        clock = [time.time()]
        table = PeerTable("eu-west", members=MEMBERS)
        counts = ExchangeCounts()
        gossip = Gossip(
            table,
            [Peer("ap-south", f"127.0.0.1:{fake.port}")],
            lambda t, now: None,
            counts=counts,
            wall=lambda: clock[0],
            backoff=Backoff(1.0, 30.0),
        )
        try:
            outcomes = []
            for step in (0.0, 0.5, 0.5, 1.0, 1.0):  # strikes back it off 1 s, then 2 s
                clock[0] += step
                await gossip.round()
                outcomes.append((fake.calls, dict(counts.calls)))
            assert [calls for calls, _ in outcomes] == [1, 1, 2, 2, 3]
            assert counts.calls == {("ap-south", "over-bounds"): 3, ("ap-south", "backed-off"): 2}
            assert "ap-south" not in table.held
            honest = sealed_message(RegionInventory("ap-south", 3, clock[0]))
            fake.answer = pb.ExchangeResponse(inventories=[honest]).SerializeToString()
            clock[0] += 4.0
            assert await gossip.round() == 1 and "ap-south" in table.held
            assert gossip.backoff.left("ap-south", clock[0]) == 0, "an answer within the bounds forgives it"
        finally:
            await gossip.peers[0].close()
            await fake.server.stop(None)

    run(scenario)


class Recording:
    """A judge that notes which thread it is asked in (and takes every inventory)."""

    def __init__(self) -> None:
        self.threads: list[int] = []

    def wrote(self, origin: str, seal: Seal, now: float) -> bool:
        self.threads.append(threading.get_ident())
        return True


def test_a_peer_s_message_is_read_off_the_event_loop_on_both_sides() -> None:
    async def scenario() -> None:
        loop_thread = threading.get_ident()
        served, called = Recording(), Recording()
        east = Callee()
        east.servicer.reader = Reader(lambda: served)
        await east.server.start()
        east.table.publish(RegionInventory("us-east", 5, time.time()))
        gossip = Gossip(
            PeerTable("eu-west", members=MEMBERS),
            [Peer("us-east", f"127.0.0.1:{east.port}")],
            lambda t, now: RegionInventory("eu-west", 1, time.time()) if "eu-west" not in t.held else None,
            reader=Reader(lambda: called),
        )
        try:
            assert await gossip.round() == 1
            assert "eu-west" in east.table.held and "us-east" in gossip.table.held
            assert served.threads and loop_thread not in served.threads, "the request, read in a worker thread"
            assert called.threads and loop_thread not in called.threads, "the answer too"
        finally:
            await gossip.peers[0].close()
            await east.server.stop(None)

    run(scenario)


def test_an_idle_region_of_the_largest_size_is_a_few_rows_and_is_read_back_whole() -> None:
    rooms = (DomainRoom("HGX-H100-8", 8, 1, 8),) * 131_000 + (DomainRoom("HGX-H100-8", 0, 0, 8),) * 72
    inv = RegionInventory("us-east", 7, 1000.0, rooms, {"q": 8}, {"ml/q": "q"})
    assert publishable(inv) is inv
    raw = encode(pb.ExchangeResponse, "us-east", {}, [inv])
    assert len(raw) < 200
    (back,) = [inventory(s) for s in read(raw, pb.ExchangeResponse).inventories]
    assert sorted(back.domains, key=lambda r: r.gpus_free) == sorted(rooms, key=lambda r: r.gpus_free)


def test_this_region_s_own_inventory_is_held_to_the_bounds_keeping_its_largest_rooms() -> None:
    idle, busy = DomainRoom("MI300X-8", 8, 1, 8), DomainRoom("MI300X-8", 0, 0, 8)
    assert len(publishable(RegionInventory("us-east", 7, 1000.0, (idle,) * 140_000)).domains) == bounds.MAX_DOMAINS
    custom = tuple(DomainRoom(f"custom-{i:05}", 4, 1, 4) for i in range(20_000))
    rooms = (busy,) * 40_000 + custom + (idle,) * 100_000
    headroom = {f"cq-{i:05}": i for i in range(20_000)}
    queues = {f"ns-{i:05}/lq": f"cq-{i:05}" for i in range(20_000)}
    made = publishable(RegionInventory("us-east", 7, 1000.0, rooms, headroom, queues))
    assert len(set(made.domains)) == bounds.MAX_ROOMS
    assert made.domains.count(idle) == 100_000 and busy not in made.domains, "the largest rooms stay"
    assert list(made.local_queues) == [f"ns-{i:05}/lq" for i in range(bounds.MAX_LOCAL_QUEUES)]
    assert len(made.headroom) == bounds.MAX_CLUSTER_QUEUES
    raw = encode(pb.ExchangeRequest, "us-east", {}, [made])
    assert (
        len(raw) <= bounds.MAX_MESSAGE_BYTES
        and len([inventory(s) for s in read(raw, pb.ExchangeRequest).inventories]) == 1
    )


def test_names_near_their_limits_by_the_thousand_are_cut_until_the_inventory_fits() -> None:
    queues = {f"{'n' * 63}/{i:05}{'q' * 248}": f"{i:05}{'c' * 251}" for i in range(bounds.MAX_LOCAL_QUEUES)}
    headroom = dict.fromkeys(queues.values(), 8)
    whole = RegionInventory("us-east", 7, 1000.0, (), headroom, queues)
    made = publishable(whole)
    assert len(body(made)) <= bounds.MAX_INVENTORY_BYTES < len(body(whole))
    assert 0 < len(made.local_queues) < bounds.MAX_LOCAL_QUEUES
    assert list(made.local_queues) == sorted(queues)[: len(made.local_queues)]


def test_a_sender_holding_more_than_a_message_carries_sends_the_rest_in_the_next_rounds() -> None:
    big = [RegionInventory(f"r{i}", 1, 1000.0, (), {f"cq-{j:04}": j for j in range(2_000)}) for i in range(3)]
    one = len(sealed_message(big[0]).SerializeToString())
    raw = encode(pb.ExchangeResponse, "us-east", {}, big, budget=2 * one + 100)
    assert [inv.origin for inv in read(raw, pb.ExchangeResponse).inventories] == ["r0", "r1"]
    assert len(read(encode(pb.ExchangeResponse, "us-east", {}, big, budget=10), pb.ExchangeResponse).inventories) == 1


def test_a_message_is_bounded_by_what_the_grpc_listener_reads() -> None:
    assert bounds.MAX_MESSAGE_BYTES == MAX_RECEIVE_BYTES

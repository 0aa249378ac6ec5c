"""How long a hostile pool peer holds a region's event loop (issue #37, item 3), for ``bench/hostile.py``.

In process: a pool exchange servicer behind the gRPC listener's receive limit takes a 450,000-queue request (refused
naming its bound, the caller then backed off) and a request at every bound (read off the loop); a region's gossip
asks a fake peer that answers 56 MB. A 1 ms ticker measures the longest the loop went without running meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

import grpc

from kilter.api import pool_pb2 as pb
from kilter.api.server import MAX_RECEIVE_BYTES
from kilter.pool import bounds
from kilter.pool.exchange import EXCHANGE, POOL, ExchangeCounts, Gossip, Peer, PoolServicer
from kilter.pool.inventory import DomainRoom, RegionInventory
from kilter.pool.peers import PeerTable
from kilter.pool.wire import sealed_message

REGIONS = frozenset({"eu-west", "us-east", "ap-south"})


async def _stall(work: Awaitable[Any]) -> dict[str, Any]:
    """Wall ms of ``work`` and the longest the event loop went without running a 1 ms ticker meanwhile."""
    worst = [0.0]

    async def tick() -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            worst[0] = max(worst[0], time.perf_counter() - t - 0.001)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.02)
    worst[0] = 0.0
    started = time.perf_counter()
    outcome = await work
    ms = (time.perf_counter() - started) * 1000
    ticker.cancel()
    return {"outcome": outcome, "ms": round(ms, 1), "loop_stall_ms": round(worst[0] * 1000, 1)}


def _at_every_bound(now: float) -> RegionInventory:
    rooms = tuple(DomainRoom(f"PLATFORM-NAME-{i % 7:06}", i % 577, i % 73, 8) for i in range(bounds.MAX_ROOMS))
    cqs = {f"cluster-queue-{i:05}-research": i for i in range(bounds.MAX_CLUSTER_QUEUES)}
    lqs = {
        f"team-{i:05}-namespace/local-queue-{i:05}": f"cluster-queue-{i:05}-research"
        for i in range(bounds.MAX_LOCAL_QUEUES)
    }
    return RegionInventory("ap-south", int(now * 1000), now, rooms, cqs, lqs)


async def _probe() -> dict[str, Any]:
    now = time.time()
    table = PeerTable("us-east", members=REGIONS)
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_RECEIVE_BYTES)])
    PoolServicer(table, lambda peer: True, ExchangeCounts()).add_to(server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()

    async def call(request: bytes) -> str:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            try:
                await channel.unary_unary(EXCHANGE, None, None)(request, timeout=30)
            except grpc.aio.AioRpcError as exc:
                return exc.code().name
        return "OK"

    fat = pb.RegionInventory(
        origin="ap-south", generation=1, produced_at=now, headroom={f"q{i}": i for i in range(450_000)}
    )
    results = {
        "request_450k_cluster_queues": await _stall(
            call(
                pb.ExchangeRequest(
                    inventories=[pb.SealedInventory(inventory=fat.SerializeToString())]
                ).SerializeToString()
            )
        ),
        "request_again_while_backed_off": await _stall(call(pb.ExchangeRequest().SerializeToString())),
    }
    table2 = PeerTable("eu-west", members=REGIONS)
    server2 = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_RECEIVE_BYTES)])
    PoolServicer(table2, lambda peer: True, ExchangeCounts()).add_to(server2)
    port2 = server2.add_insecure_port("127.0.0.1:0")
    await server2.start()
    largest = pb.ExchangeRequest(inventories=[sealed_message(_at_every_bound(now))]).SerializeToString()

    async def call2() -> str:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port2}") as channel:
            await channel.unary_unary(EXCHANGE, None, None)(largest, timeout=30)
        return "OK"

    results["request_at_every_bound"] = {"bytes": len(largest), **await _stall(call2())}
    huge = pb.RegionInventory(
        origin="ap-south", generation=1, produced_at=now, headroom={f"q{i}": i for i in range(3_500_000)}
    )
    answer = pb.ExchangeResponse(
        inventories=[pb.SealedInventory(inventory=huge.SerializeToString())]
    ).SerializeToString()
    fake = grpc.aio.server()

    async def answer_fat(raw: bytes, context: Any) -> bytes:
        return answer

    handler = grpc.unary_unary_rpc_method_handler(answer_fat)
    fake.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(POOL, {"Exchange": handler}),))
    fake_port = fake.add_insecure_port("127.0.0.1:0")
    await fake.start()
    gossip = Gossip(
        PeerTable("eu-west", members=REGIONS), [Peer("ap-south", f"127.0.0.1:{fake_port}")], lambda t, n: None
    )
    results["peer_answering_50_MiB"] = {"bytes": len(answer), **await _stall(gossip.round())}
    results["next_round"] = await _stall(gossip.round())
    results["calls"] = {f"{peer}/{outcome}": n for (peer, outcome), n in sorted(gossip.counts.calls.items())}
    await gossip.peers[0].close()
    for s in (server, server2, fake):
        await s.stop(None)
    return results


def pool_probe() -> dict[str, Any]:
    """Each case's outcome, wall milliseconds and longest loop stall."""
    return asyncio.run(_probe())

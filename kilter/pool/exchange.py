"""The inventory exchange over gRPC: ``kilter.v1.Pool/Exchange`` served, and called on every peer each round.

One call both pulls and pushes (``pool.proto``): the caller sends its
digest and what it holds newer than the callee's last digest, the callee
keeps the newer of each and answers with what the caller lacks. In a quiet
pool a round is two digests per link, a few dozen bytes per region.

``Gossip`` runs the rounds in ``kilter serve``'s event loop: every
``interval_s`` it publishes this region's inventory when it changed (or
when it is half its time to live old, so peers never age out a quiet
region), then calls every peer at once, each with its own deadline. A peer
that does not answer is tried again next round; nothing waits for it, and
what it said before ages out on its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from kilter.api import pool_pb2 as pb
from kilter.api import pool_pb2_grpc as pb_grpc
from kilter.api.server import Service
from kilter.model.errors import InputError
from kilter.pool.inventory import RegionInventory
from kilter.pool.peers import PeerTable
from kilter.pool.wire import check_digest, message_inventory, messages

__all__ = ["POOL", "ExchangeCounts", "Gossip", "Peer", "PoolServicer", "pool_service"]

log = logging.getLogger("kilter.pool")

POOL = pb.DESCRIPTOR.services_by_name["Pool"].full_name


@dataclass
class ExchangeCounts:
    """What the exchange did, for ``/metrics``: calls by outcome, bytes each way, inventories taken."""

    calls: dict[tuple[str, str], int] = field(default_factory=dict)  # (peer, ok|failed) -> calls made
    served: int = 0
    refused: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0

    def count(self, peer: str, outcome: str) -> None:
        self.calls[(peer, outcome)] = self.calls.get((peer, outcome), 0) + 1


class PoolServicer(pb_grpc.PoolServicer):
    """Answers peers' exchanges from ``table``; ``trusted`` judges the caller as the Placement service does."""

    def __init__(self, table: PeerTable, trusted: Callable[[str], bool], counts: ExchangeCounts) -> None:
        self.table = table
        self.trusted = trusted
        self.counts = counts

    async def Exchange(
        self, request: pb.ExchangeRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ExchangeResponse:
        if not self.trusted(context.peer()):
            self.counts.refused += 1
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"caller {context.peer()} is not a trusted peer")
        try:
            digest = check_digest(request.digest, "digest")
            offered = [message_inventory(m, f"inventories[{i}]") for i, m in enumerate(request.inventories)]
        except InputError as exc:
            self.counts.refused += 1
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, exc.message)
        self.table.offer(offered)
        self.counts.served += 1
        return pb.ExchangeResponse(
            region=self.table.region, digest=self.table.digest(), inventories=messages(self.table.newer_than(digest))
        )


def pool_service(servicer: PoolServicer) -> Service:
    """The exchange as a service of kilter's gRPC listener."""
    return Service(POOL, lambda server: pb_grpc.add_PoolServicer_to_server(servicer, server))


@dataclass
class Peer:
    """A peer as this region calls it: its name, ``host:port``, and the channel credentials (None: plaintext)."""

    name: str
    target: str
    credentials: grpc.ChannelCredentials | None = None
    server_name: str = ""  # the name its certificate is checked against, when not the target's host
    said: dict[str, int] = field(default_factory=dict)  # its digest, as of its last answer
    channel: grpc.aio.Channel | None = None

    def stub(self) -> pb_grpc.PoolAsyncStub:
        if self.channel is None:
            options: list[tuple[str, Any]] = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
            if self.server_name:
                options.append(("grpc.ssl_target_name_override", self.server_name))
            if self.credentials is None:
                self.channel = grpc.aio.insecure_channel(self.target, options=options)
            else:
                self.channel = grpc.aio.secure_channel(self.target, self.credentials, options=options)
        return pb_grpc.PoolStub(self.channel)  # an aio channel makes the async stub (the .pyi's overload)

    async def close(self) -> None:
        if self.channel is not None:
            await self.channel.close(None)
            self.channel = None


Publisher = Callable[[PeerTable, float], RegionInventory | None]
"""Makes this region's inventory for the table at a time, or None when nothing changed since the last one."""


class Gossip:
    """The exchange rounds of one region: publish, then one call to every peer, every ``interval_s``."""

    def __init__(
        self,
        table: PeerTable,
        peers: Sequence[Peer],
        publish: Publisher,
        *,
        interval_s: float = 1.0,
        call_timeout_s: float = 2.0,
        counts: ExchangeCounts | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.table = table
        self.peers = list(peers)
        self.publish = publish
        self.interval_s = interval_s
        self.call_timeout_s = call_timeout_s
        self.counts = counts or ExchangeCounts()
        self.wall = wall
        self.rounds = 0

    def refresh(self) -> None:
        """Publish this region's inventory if it changed, or if it is half its time to live old."""
        now = self.wall()
        made = self.publish(self.table, now)
        own = self.table.held.get(self.table.region)
        if made is None and own is not None and now - own.produced_at >= self.table.ttl_s / 2:
            made = RegionInventory(
                own.origin, self.table.next_generation(now), now, own.domains, own.headroom, own.local_queues
            )
        if made is not None:
            self.table.publish(made)

    async def call(self, peer: Peer) -> bool:
        """One exchange with ``peer``; False when it failed (logged at debug: a dead peer fails every round)."""
        request = pb.ExchangeRequest(
            region=self.table.region, digest=self.table.digest(), inventories=messages(self.table.newer_than(peer.said))
        )
        try:
            answer = await peer.stub().Exchange(request, timeout=self.call_timeout_s)
            taken = [message_inventory(m, f"inventories[{i}]") for i, m in enumerate(answer.inventories)]
            said = check_digest(answer.digest, "digest")
        except (grpc.RpcError, InputError) as exc:
            self.counts.count(peer.name, "failed")
            log.debug("exchange with %s failed: %s", peer.name, exc)
            return False
        self.counts.bytes_sent += request.ByteSize()
        self.counts.bytes_received += answer.ByteSize()
        self.counts.count(peer.name, "ok")
        self.table.offer(taken)
        peer.said = said
        return True

    async def round(self) -> int:
        """Publish, then exchange with every peer at once; how many answered."""
        self.refresh()
        answered = await asyncio.gather(*(self.call(p) for p in self.peers))
        self.rounds += 1
        return sum(answered)

    async def run(self) -> None:
        """Rounds until cancelled; a round that raises is logged and the next one comes as usual."""
        try:
            while True:
                started = time.monotonic()
                try:
                    await self.round()
                except Exception:
                    log.exception("pool exchange round failed")
                await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - started)))
        finally:
            await asyncio.gather(*(p.close() for p in self.peers), return_exceptions=True)

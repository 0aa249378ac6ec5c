"""The inventory exchange over gRPC: ``kilter.v1.Pool/Exchange`` served, and called on every peer each round.

One call both pulls and pushes (``pool.proto``): the caller sends its
digest and what it holds newer than the callee's last digest, the callee
keeps the newer of each and answers with what the caller lacks. In a quiet
pool a round is two digests per link, a few dozen bytes per region.

``Gossip`` runs the rounds in ``kilter serve``'s event loop: every
``interval_s`` it publishes this region's inventory when it changed (or
when it is half its time to live old, so peers never age out a quiet
region), sealed by ``authorship``, then calls every peer at once, each with
its own deadline. A peer that does not answer is tried again next round;
nothing waits for it, and what it said before ages out on its own.

Both sides take a peer's message as bytes and read it in a worker thread,
one at a time (``Reader``): parsing, the bounds, the fields and the seals
cost the event loop nothing, however large a message within the bounds
is. A message over them is refused and its sender backed off (``backoff``):
a peer is not called, a caller not answered, for a while.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from kilter.api import pool_pb2 as pb
from kilter.api.server import Service
from kilter.model.errors import InputError, TooLarge
from kilter.pool import bounds, wire
from kilter.pool.authorship import Judge, Sealer, Unchecked
from kilter.pool.backoff import Backoff
from kilter.pool.identity import PoolFiles
from kilter.pool.inventory import RegionInventory
from kilter.pool.peers import PeerTable

__all__ = [
    "EXCHANGE",
    "POOL",
    "UNCHANGED",
    "ExchangeCounts",
    "Gossip",
    "Peer",
    "PoolServicer",
    "Reader",
    "Received",
    "Unchanged",
    "pool_service",
    "receive",
]

log = logging.getLogger("kilter.pool")

POOL = pb.DESCRIPTOR.services_by_name["Pool"].full_name
EXCHANGE = f"/{POOL}/Exchange"
_BOUNDS = "the pool's bounds (docs/pool.md)"


@dataclass
class ExchangeCounts:
    """What the exchange did, for ``/metrics``: calls by outcome, bytes each way, what was refused or dropped."""

    calls: dict[tuple[str, str], int] = field(default_factory=dict)  # (peer, outcome) -> calls made
    served: int = 0
    refused: int = 0  # calls this region refused: untrusted, malformed, over the bounds, or backed off
    over_bounds: int = 0  # calls this region refused for going over the bounds (each a strike)
    forged: int = 0  # inventories dropped as not written by their origin
    bytes_sent: int = 0
    bytes_received: int = 0

    def count(self, peer: str, outcome: str) -> None:
        self.calls[(peer, outcome)] = self.calls.get((peer, outcome), 0) + 1


@dataclass(frozen=True)
class Received:
    """A peer's message as kept: its digest, and the inventories their origins wrote (``forged`` the others)."""

    digest: dict[str, int]
    inventories: list[RegionInventory]
    forged: int


def receive(raw: bytes, kind: wire.Kind, judge: Judge, heard: Mapping[str, int], now: float) -> Received:
    """Read ``raw`` within the bounds and keep the inventories newer than ``heard`` (``PeerTable.heard``) that
    ``judge`` finds written by their origin, reading only those in full; TooLarge or InputError as ``wire``. Pure
    work on its arguments: safe in a worker thread."""
    got = wire.read(raw, kind)
    newest = dict(heard)
    written, forged = [], 0
    for sealed in got.inventories:
        if sealed.generation <= newest.get(sealed.origin, -1):
            continue  # old news, or a second copy in one message: ``offer`` would ignore it
        if not judge.wrote(sealed.origin, sealed.seal, now):
            forged += 1
            continue
        newest[sealed.origin] = sealed.generation
        written.append(wire.inventory(sealed))
    return Received(got.digest, written, forged)


class Reader:
    """Reads peers' messages off the event loop, one at a time, so a region reading a large one keeps serving
    and at most one message's decoding is in memory. ``judge`` gives the judge to use now (``Authors.judge``)."""

    def __init__(self, judge: Callable[[], Judge]) -> None:
        self.judge = judge
        self._one = asyncio.Semaphore(1)

    async def read(self, raw: bytes, kind: wire.Kind, table: PeerTable, now: float) -> Received:
        """``raw`` read for ``table``; what it holds is taken when the reading starts (it only ever grows, so an
        inventory skipped as old news then is old news after)."""
        judge = self.judge()
        async with self._one:
            heard = table.heard()
            return await asyncio.to_thread(receive, raw, kind, judge, heard, now)


def _caller(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    """Who is calling, to back off: the names of its client certificate, else its address without the port."""
    names = context.auth_context().get("x509_subject_alternative_name") or []
    if names:
        return "cert:" + ",".join(sorted(n.decode("utf-8", "replace") for n in names))
    return context.peer().rpartition(":")[0]


class PoolServicer:
    """Answers peers' exchanges from ``table``; ``trusted`` judges the caller as the Placement service does."""

    def __init__(
        self,
        table: PeerTable,
        trusted: Callable[[str], bool],
        counts: ExchangeCounts,
        wall: Callable[[], float] = time.time,
        *,
        reader: Reader | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.table = table
        self.trusted = trusted
        self.counts = counts
        self.wall = wall
        self.reader = reader or Reader(lambda: Unchecked(table.region))
        self.backoff = backoff or Backoff()

    async def exchange(self, raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        """``Exchange``, request and answer as bytes: the request is read off the event loop."""
        if not self.trusted(context.peer()):
            self.counts.refused += 1
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"caller {context.peer()} is not a trusted peer")
        caller, now = _caller(context), self.wall()
        wait = self.backoff.left(caller, now)
        if wait > 0:
            self.counts.refused += 1
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, f"not answered for {wait:.1f}s after a message over {_BOUNDS}"
            )
        try:
            got = await self.reader.read(raw, pb.ExchangeRequest, self.table, now)
        except TooLarge as exc:
            self.counts.refused += 1
            self.counts.over_bounds += 1
            waits = self.backoff.strike(caller, now)
            log.warning("pool caller %r went over %s (%s); not answered for %.0fs", caller, _BOUNDS, exc, waits)
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{exc.message}: over {_BOUNDS}")
        except InputError as exc:
            self.counts.refused += 1
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, exc.message)
        self.backoff.forgive(caller)
        self.counts.forged += got.forged
        self.table.offer(got.inventories, self.wall())
        self.counts.served += 1
        return wire.encode(
            pb.ExchangeResponse, self.table.region, self.table.digest(), self.table.newer_than(got.digest)
        )

    def add_to(self, server: grpc.aio.Server) -> None:
        """Serve ``kilter.v1.Pool`` on ``server``, taking requests as bytes (no decoding by gRPC on the loop)."""
        handler = grpc.unary_unary_rpc_method_handler(self.exchange)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(POOL, {"Exchange": handler}),))


def pool_service(servicer: PoolServicer) -> Service:
    """The exchange as a service of kilter's gRPC listener."""
    return Service(POOL, servicer.add_to)


@dataclass
class Peer:
    """A peer as this region calls it: its name, ``host:port``, and the channel credentials (None: plaintext)."""

    name: str
    target: str
    credentials: PoolFiles | grpc.ChannelCredentials | None = None  # fixed ones: a client without a certificate
    server_name: str = ""  # the name its certificate is checked against, when not the target's host
    said: dict[str, int] = field(default_factory=dict)  # its digest, as of its last answer
    channel: grpc.aio.Channel | None = None
    version: int = -1  # of the credentials its channel was built with

    async def _channel(self) -> grpc.aio.Channel:
        credentials: grpc.ChannelCredentials | None
        if isinstance(self.credentials, PoolFiles):
            current = self.credentials.current()
            credentials, version = current.credentials, current.version
        else:
            credentials, version = self.credentials, 0
        if self.channel is not None and version != self.version:
            await self.close()
        if self.channel is None:
            self.version = version
            options: list[tuple[str, Any]] = [("grpc.max_receive_message_length", bounds.MAX_MESSAGE_BYTES)]
            if self.server_name:
                options.append(("grpc.ssl_target_name_override", self.server_name))
            if credentials is None:
                self.channel = grpc.aio.insecure_channel(self.target, options=options)
            else:
                self.channel = grpc.aio.secure_channel(self.target, credentials, options=options)
        return self.channel

    async def exchange(self, request: bytes, timeout_s: float) -> bytes:
        """One ``Exchange`` call, as bytes both ways: the answer is read off the event loop, by ``Reader``."""
        call = (await self._channel()).unary_unary(EXCHANGE, None, None)
        answer = await call(request, timeout=timeout_s)
        return bytes(answer)

    async def close(self) -> None:
        if self.channel is not None:
            await self.channel.close(None)
            self.channel = None


class Unchanged:
    """A publisher's answer: the last inventory is still what the state says (so it may be stamped anew)."""


UNCHANGED = Unchanged()
Publisher = Callable[[PeerTable, float], "RegionInventory | Unchanged | None"]
"""Makes this region's inventory for the table at a time: a new one, ``UNCHANGED`` when the state still says
what the last one did, or None when the state cannot be read now (then the last one ages out, never renewed)."""


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
        is_writer: Callable[[], bool] = lambda: True,
        sealer: Sealer | None = None,
        reader: Reader | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.is_writer = is_writer  # only the leader replica authors the region's inventory; others relay
        self.sealer = sealer or Sealer()
        self.reader = reader or Reader(lambda: Unchecked(table.region))
        self.backoff = backoff or Backoff(interval_s, table.ttl_s)
        self.table = table
        self.peers = list(peers)
        self.publish = publish
        self.interval_s = interval_s
        self.call_timeout_s = call_timeout_s
        self.counts = counts or ExchangeCounts()
        self.wall = wall
        self.rounds = 0

    def refresh(self) -> None:
        """Publish this region's inventory if it changed, or stamp it anew when the state confirms it and it is
        half its time to live old; nothing while this replica is not the leader, or the state cannot be read."""
        if not self.is_writer():
            return
        now = self.wall()
        made = self.publish(self.table, now)
        own = self.table.held.get(self.table.region)
        if isinstance(made, Unchanged):
            if own is None or now - own.produced_at < self.table.ttl_s / 2:
                return
            made = RegionInventory(
                own.origin, self.table.next_generation(now), now, own.domains, own.headroom, own.local_queues
            )
        if made is not None:
            self.table.publish(self.sealer.seal(made))

    async def call(self, peer: Peer) -> bool:
        """One exchange with ``peer``; False when it failed (logged at debug: a dead peer fails every round), or
        when ``peer`` is backed off: then it is not called at all."""
        now = self.wall()
        if self.backoff.left(peer.name, now) > 0:
            self.counts.count(peer.name, "backed-off")
            return False
        request = wire.encode(
            pb.ExchangeRequest, self.table.region, self.table.digest(), self.table.newer_than(peer.said)
        )
        try:
            answer = await peer.exchange(request, self.call_timeout_s)
            got = await self.reader.read(answer, pb.ExchangeResponse, self.table, now)
        except TooLarge as exc:
            return self._strike(peer, str(exc), now)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:  # its answer past gRPC's limit, or its refusal
                return self._strike(peer, exc.details() or "", now)
            return self._failed(peer, exc)
        except (grpc.RpcError, InputError, ValueError) as exc:
            return self._failed(peer, exc)
        self.backoff.forgive(peer.name)
        self.counts.bytes_sent += len(request)
        self.counts.bytes_received += len(answer)
        self.counts.count(peer.name, "ok")
        self.counts.forged += got.forged
        self.table.offer(got.inventories, self.wall())
        peer.said = got.digest
        return True

    def _failed(self, peer: Peer, exc: Exception) -> bool:
        self.counts.count(peer.name, "failed")
        log.debug("exchange with %s failed: %s", peer.name, exc)
        return False

    def _strike(self, peer: Peer, why: str, now: float) -> bool:
        waits = self.backoff.strike(peer.name, now)
        self.counts.count(peer.name, "over-bounds")
        log.warning("pool peer %s went over %s (%s); not called for %.0fs", peer.name, _BOUNDS, why[:200], waits)
        return False

    async def round(self) -> int:
        """Publish, then exchange with every peer at once; how many answered. A publish that fails is logged and
        the round goes on: relaying the others' inventories does not depend on this region's own."""
        try:
            self.refresh()
        except Exception:
            log.exception("publishing this region's inventory failed")
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

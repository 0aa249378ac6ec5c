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
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from kilter.api import pool_pb2 as pb
from kilter.api import pool_pb2_grpc as pb_grpc
from kilter.api.server import Service
from kilter.model.errors import InputError
from kilter.pool.inventory import RegionInventory
from kilter.pool.peers import PeerTable
from kilter.pool.wire import check_digest, message_inventory, messages

__all__ = [
    "POOL",
    "UNCHANGED",
    "ChannelFiles",
    "ExchangeCounts",
    "Gossip",
    "Peer",
    "PoolServicer",
    "Unchanged",
    "pool_service",
]

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

    def __init__(
        self,
        table: PeerTable,
        trusted: Callable[[str], bool],
        counts: ExchangeCounts,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.table = table
        self.trusted = trusted
        self.counts = counts
        self.wall = wall

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
        self.table.offer(offered, self.wall())
        self.counts.served += 1
        return pb.ExchangeResponse(
            region=self.table.region, digest=self.table.digest(), inventories=messages(self.table.newer_than(digest))
        )


def pool_service(servicer: PoolServicer) -> Service:
    """The exchange as a service of kilter's gRPC listener."""
    return Service(POOL, lambda server: pb_grpc.add_PoolServicer_to_server(servicer, server))


class ChannelFiles:
    """The client side of the pool's mutual TLS, re-read when its files change (cert-manager renews them in
    place): ``current`` gives the credentials and a version that grows with each reload, so a peer's channel is
    rebuilt with the new certificate instead of presenting the old one until it expires."""

    def __init__(self, cert: Path, key: Path, ca: Path, *, check_every_s: float = 5.0) -> None:
        self.files = (cert, key, ca)
        self.check_every_s = check_every_s
        self.version = 0
        self._checked = time.monotonic()
        self._stamp = self._files_stamp()
        self._credentials = self._load()

    def _files_stamp(self) -> tuple[int, ...] | None:
        try:
            return tuple(n for p in self.files for st in (os.stat(p),) for n in (st.st_mtime_ns, st.st_ino))
        except OSError:
            return None

    def _load(self) -> grpc.ChannelCredentials:
        cert, key, ca = (p.read_bytes() for p in self.files)
        return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)

    def current(self) -> tuple[grpc.ChannelCredentials, int]:
        now = time.monotonic()
        if now - self._checked >= self.check_every_s:
            self._checked = now
            stamp = self._files_stamp()
            if stamp is not None and stamp != self._stamp:
                try:
                    self._credentials = self._load()
                except OSError as exc:
                    log.warning("pool client certificate not reloaded yet (%s); still using the previous one", exc)
                else:
                    self._stamp = stamp
                    self.version += 1
                    log.info("pool client certificate %s reloaded", self.files[0])
        return self._credentials, self.version


@dataclass
class Peer:
    """A peer as this region calls it: its name, ``host:port``, and the channel credentials (None: plaintext)."""

    name: str
    target: str
    credentials: ChannelFiles | grpc.ChannelCredentials | None = None  # fixed ones: a client without a certificate
    server_name: str = ""  # the name its certificate is checked against, when not the target's host
    said: dict[str, int] = field(default_factory=dict)  # its digest, as of its last answer
    channel: grpc.aio.Channel | None = None
    version: int = -1  # of the credentials its channel was built with

    async def stub(self) -> pb_grpc.PoolAsyncStub:
        credentials: grpc.ChannelCredentials | None
        if isinstance(self.credentials, ChannelFiles):
            credentials, version = self.credentials.current()
        else:
            credentials, version = self.credentials, 0
        if self.channel is not None and version != self.version:
            await self.close()
        if self.channel is None:
            self.version = version
            options: list[tuple[str, Any]] = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
            if self.server_name:
                options.append(("grpc.ssl_target_name_override", self.server_name))
            if credentials is None:
                self.channel = grpc.aio.insecure_channel(self.target, options=options)
            else:
                self.channel = grpc.aio.secure_channel(self.target, credentials, options=options)
        return pb_grpc.PoolStub(self.channel)  # an aio channel makes the async stub (the .pyi's overload)

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
    ) -> None:
        self.is_writer = is_writer  # only the leader replica authors the region's inventory; others relay
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
            self.table.publish(made)

    async def call(self, peer: Peer) -> bool:
        """One exchange with ``peer``; False when it failed (logged at debug: a dead peer fails every round)."""
        try:
            request = pb.ExchangeRequest(
                region=self.table.region,
                digest=self.table.digest(),
                inventories=messages(self.table.newer_than(peer.said)),
            )
            answer = await (await peer.stub()).Exchange(request, timeout=self.call_timeout_s)
            taken = [message_inventory(m, f"inventories[{i}]") for i, m in enumerate(answer.inventories)]
            said = check_digest(answer.digest, "digest")
        except (grpc.RpcError, InputError, ValueError) as exc:
            self.counts.count(peer.name, "failed")
            log.debug("exchange with %s failed: %s", peer.name, exc)
            return False
        self.counts.bytes_sent += request.ByteSize()
        self.counts.bytes_received += answer.ByteSize()
        self.counts.count(peer.name, "ok")
        self.table.offer(taken, self.wall())
        peer.said = said
        return True

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

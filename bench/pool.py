"""The pool's exchange: how fast ten regions' inventories converge after a change, and what a round costs.

Ten regions, each a ``grpc.aio`` server on 127.0.0.1 serving ``kilter.v1.Pool`` and a ``Gossip`` calling
every other region (the full mesh a ``pool`` section lists), at the default exchange interval (1 s), their
rounds started at random offsets as independent processes would be. Each region publishes 100 scale-up
domains (an NVL72 fleet of 7,200 GPUs, 19 distinct rooms: a domain's free trays vary). A change is a new
inventory of one region; convergence is the time
until every other region holds it. The issue's target: within 2 s. Bytes per round are what the regions
sent and received as callers, per region: a quiet round (digests only) and the round that carries a change.
All ten share one event loop on this machine (2 cores), which makes the figures pessimistic. The exchange
runs in plaintext, unsigned; ``sealed_inventory_bytes`` is one inventory as a region over mutual TLS sends it
(signed with an ECDSA P-256 key, its certificate along, as ``kilter certs`` issues them).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import statistics
import time
from typing import Any

import grpc

from kilter.api import pool_pb2 as pb
from kilter.pool import authorship, identity, wire
from kilter.pool.exchange import ExchangeCounts, Gossip, Peer, PoolServicer
from kilter.pool.inventory import DomainRoom, RegionInventory
from kilter.pool.peers import PeerTable
from kilter.webhooks import certs

__all__ = ["main"]

REGIONS = 10
DOMAINS = 100
TRIALS = 12
INTERVAL_S = 1.0


def _inventory(table: PeerTable, now: float, free: int) -> RegionInventory:
    rooms = tuple(DomainRoom("GB200-NVL72", (free + i) % 19 * 4, (free + i) % 19, 4) for i in range(DOMAINS))
    return RegionInventory(
        table.region, table.next_generation(now), now, rooms, {"research": 4096}, {"ml/research": "research"}
    )


async def _run() -> dict[str, Any]:
    names = [f"region-{i}" for i in range(REGIONS)]
    tables = {n: PeerTable(n, members=frozenset(names)) for n in names}
    counts = {n: ExchangeCounts() for n in names}
    servers, ports = [], {}
    for n in names:
        server = grpc.aio.server()
        PoolServicer(tables[n], lambda peer: True, counts[n]).add_to(server)
        ports[n] = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
    pending: dict[str, int] = {}  # region -> free trays of the inventory to publish next

    def publisher(name: str) -> Any:
        def publish(table: PeerTable, now: float) -> RegionInventory | None:
            if name in pending or name not in table.held:
                return _inventory(table, now, pending.pop(name, 18))
            return None

        return publish

    gossips = {
        n: Gossip(
            tables[n],
            [Peer(p, f"127.0.0.1:{ports[p]}") for p in names if p != n],
            publisher(n),
            interval_s=INTERVAL_S,
            counts=counts[n],
        )
        for n in names
    }
    rng = random.Random(7)
    tasks = []
    for n in names:
        await asyncio.sleep(rng.uniform(0, INTERVAL_S / REGIONS))
        tasks.append(asyncio.create_task(gossips[n].run()))
    await asyncio.sleep(3 * INTERVAL_S)  # everyone heard everyone
    quiet_before = sum(c.bytes_sent + c.bytes_received for c in counts.values())
    rounds_before = sum(g.rounds for g in gossips.values())
    await asyncio.sleep(3 * INTERVAL_S)
    quiet = (sum(c.bytes_sent + c.bytes_received for c in counts.values()) - quiet_before) / max(
        1, sum(g.rounds for g in gossips.values()) - rounds_before
    )
    converge = []
    change_bytes = []
    for trial in range(TRIALS):
        origin = names[trial % REGIONS]
        before = {n: tables[n].held[origin].generation for n in names if n != origin}
        bytes_before = sum(c.bytes_sent + c.bytes_received for c in counts.values())
        pending[origin] = trial % 17
        started = time.monotonic()
        while not all(tables[n].held[origin].generation > before[n] for n in before):
            await asyncio.sleep(0.005)
        converge.append(time.monotonic() - started)
        change_bytes.append(sum(c.bytes_sent + c.bytes_received for c in counts.values()) - bytes_before)
        await asyncio.sleep(rng.uniform(0, INTERVAL_S))
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for server in servers:
        await server.stop(None)
    return {
        "regions": REGIONS,
        "domains_per_region": DOMAINS,
        "exchange_interval_s": INTERVAL_S,
        "trials": TRIALS,
        "converge_s_median": round(statistics.median(converge), 3),
        "converge_s_max": round(max(converge), 3),
        "target_s": 2.0,
        "quiet_round_bytes_per_region": round(quiet),
        "change_bytes_all_regions_median": round(statistics.median(change_bytes)),
        "inventory_bytes": _message_bytes(),
        "sealed_inventory_bytes": _sealed_bytes(),
    }


def _message_bytes() -> int:
    return wire.sealed_message(_inventory(PeerTable("region-0"), 0.0, 18)).ByteSize()


def _sealed_bytes() -> int:
    issued = certs.issue(None, ["kilter.region-0.pool.example.com"], dt.datetime.now(dt.UTC))
    me = identity.load(issued.tls_crt, issued.tls_key, issued.ca_crt, 0)
    data = wire.body(_inventory(PeerTable("region-0"), 0.0, 18))
    signature = authorship.sign(me.key, authorship.CONTEXT + data)
    return pb.SealedInventory(inventory=data, signature=signature, certificates=me.chain).ByteSize()


def main() -> dict[str, Any]:
    return asyncio.run(_run())


if __name__ == "__main__":
    print(main())

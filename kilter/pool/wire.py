"""The pool's inventories as ``kilter.v1.Pool`` messages, and back, checked field by field.

A peer's message is input like any other: a name that is empty or too
long, a negative count, a time that is not a number, or more domains than
any fleet has, is refused naming the field (``inventories[2].origin``), so
the exchange answers INVALID_ARGUMENT and nothing already held changes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from kilter.api import pool_pb2 as pb
from kilter.model.errors import InputError
from kilter.pool.inventory import DomainRoom, RegionInventory

__all__ = [
    "MAX_DOMAINS",
    "MAX_GPUS",
    "MAX_NAME",
    "MAX_QUEUE_KEY",
    "check_digest",
    "inventory_message",
    "message_inventory",
    "messages",
]

MAX_NAME = 256
"""Longest region, platform or queue name: Kueue's limit on a MultiKueue cluster's name, and far above a label's."""
MAX_QUEUE_KEY = 63 + 1 + 253
"""Longest LocalQueue key, ``NAMESPACE/NAME``: a namespace is a DNS label, a LocalQueue's name a DNS subdomain."""
MAX_DOMAINS = 100_000
"""More scale-up domains than one region could hold (100,000 racks): a bound on what one message may make kilter
keep, not a capacity plan."""
MAX_GPUS = 1 << 20


def inventory_message(inv: RegionInventory) -> pb.RegionInventory:
    return pb.RegionInventory(
        origin=inv.origin,
        generation=inv.generation,
        produced_at=inv.produced_at,
        domains=[
            pb.DomainRoom(
                platform=r.platform,
                gpus_free=r.gpus_free,
                largest_pods=r.largest_pods,
                largest_gpus_per_pod=r.largest_gpus_per_pod,
            )
            for r in inv.domains
        ],
        headroom=dict(inv.headroom),
        local_queues=dict(inv.local_queues),
    )


def _name(value: str, where: str, *, limit: int = MAX_NAME) -> str:
    if not value:
        raise InputError(f"{where}: must not be empty")
    if len(value) > limit:
        raise InputError(f"{where}: longer than {limit} characters")
    return value


def _count(value: int, where: str) -> int:
    if not 0 <= value <= MAX_GPUS:
        raise InputError(f"{where}: {value} is not between 0 and {MAX_GPUS}")
    return value


def message_inventory(msg: pb.RegionInventory, where: str) -> RegionInventory:
    """The inventory a message carries; InputError naming the first bad field."""
    origin = _name(msg.origin, f"{where}.origin")
    if msg.generation < 0:
        raise InputError(f"{where}.generation: must not be negative")
    if not math.isfinite(msg.produced_at) or msg.produced_at < 0:
        raise InputError(f"{where}.producedAt: {msg.produced_at} is not a time")
    if len(msg.domains) > MAX_DOMAINS:
        raise InputError(f"{where}.domains: more than {MAX_DOMAINS}")
    rooms = []
    for i, d in enumerate(msg.domains):
        at = f"{where}.domains[{i}]"
        rooms.append(
            DomainRoom(
                _name(d.platform, f"{at}.platform"),
                _count(d.gpus_free, f"{at}.gpusFree"),
                _count(d.largest_pods, f"{at}.largestPods"),
                _count(d.largest_gpus_per_pod, f"{at}.largestGpusPerPod"),
            )
        )
    headroom = {
        _name(q, f"{where}.headroom"): _count(max(0, n), f"{where}.headroom[{q[:80]}]") for q, n in msg.headroom.items()
    }
    queues = {
        _name(lq, f"{where}.localQueues", limit=MAX_QUEUE_KEY): _name(cq, f"{where}.localQueues[{lq[:80]}]")
        for lq, cq in msg.local_queues.items()
    }
    return RegionInventory(origin, msg.generation, msg.produced_at, tuple(rooms), headroom, queues)


def check_digest(digest: Mapping[str, int], where: str) -> dict[str, int]:
    for origin, generation in digest.items():
        _name(origin, f"{where}")
        if generation < 0:
            raise InputError(f"{where}[{origin}]: generation must not be negative")
    return dict(digest)


def messages(inventories: Iterable[RegionInventory]) -> list[pb.RegionInventory]:
    return [inventory_message(inv) for inv in inventories]

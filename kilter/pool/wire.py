"""The pool's messages: inventories as their origin sealed them, and exchanges, read within the pool's bounds.

A peer's message is input like any other. Reading one checks every size
and count against ``bounds`` before the part it bounds is decoded (the
outer message carries each inventory as bytes, so a huge one is refused
before it is parsed) and refuses it with ``TooLarge``; then a name that is
empty or too long, a negative count or a time that is not a number is an
``InputError`` naming the field (``inventories[2].origin``). Either way the
exchange answers with an error and nothing already held changes. Reading
is in two steps: ``read`` parses (in protobuf's C code) and checks what
decides whether an inventory is wanted, and ``inventory`` does the
Python-level work for the ones that are, so a message full of inventories
that are old news or forged costs little more than its parse.

An inventory travels as ``SealedInventory``: the bytes its origin
serialized and signed, forwarded untouched by every relay, so what a
signature covers never has to be encoded again (no canonical form is
needed). Domains with the same room are one row with a count: a region's
thousands of idle or full domains are a handful of rows.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from kilter.api import pool_pb2 as pb
from kilter.model.errors import InputError, TooLarge
from kilter.pool import bounds
from kilter.pool.inventory import DomainRoom, RegionInventory, Seal

__all__ = [
    "MAX_GPUS",
    "MAX_NAME",
    "MAX_QUEUE_KEY",
    "Exchange",
    "Kind",
    "Sealed",
    "body",
    "check_digest",
    "encode",
    "inventory",
    "pack",
    "read",
    "sealed",
    "sealed_message",
]

MAX_NAME = 256
"""Longest region, platform or queue name: Kueue's limit on a MultiKueue cluster's name, and far above a label's."""
MAX_QUEUE_KEY = 63 + 1 + 253
"""Longest LocalQueue key, ``NAMESPACE/NAME``: a namespace is a DNS label, a LocalQueue's name a DNS subdomain."""
MAX_GPUS = 1 << 20
"""Largest GPU or pod count one field may hold: more than any region has."""

Kind = type[pb.ExchangeRequest] | type[pb.ExchangeResponse]
"""Which way an exchange message goes: a call's request or its answer."""

_ENVELOPE = 16  # bytes a repeated field's tag and length add to each inventory, at most


def _row(room: DomainRoom, domains: int) -> pb.DomainRoom:
    return pb.DomainRoom(
        platform=room.platform,
        gpus_free=room.gpus_free,
        largest_pods=room.largest_pods,
        largest_gpus_per_pod=room.largest_gpus_per_pod,
        domains=domains,
    )


def _order(room: DomainRoom) -> tuple[str, int, int, int]:
    return room.platform, -room.gpus_free, -room.largest_gpus_per_pod, -room.largest_pods


def body(inv: RegionInventory) -> bytes:
    """``inv`` serialized as its origin signs it: one row per distinct room, in a fixed order."""
    rows = sorted(Counter(inv.domains).items(), key=lambda kv: _order(kv[0]))
    msg = pb.RegionInventory(
        origin=inv.origin,
        generation=inv.generation,
        produced_at=inv.produced_at,
        domains=[_row(room, n) for room, n in rows],
        headroom=dict(inv.headroom),
        local_queues=dict(inv.local_queues),
    )
    return msg.SerializeToString(deterministic=True)


def sealed_message(inv: RegionInventory) -> pb.SealedInventory:
    """``inv`` as it travels: its seal's bytes as they are, or, not yet sealed, unsigned."""
    seal = inv.seal or Seal(body(inv))
    return pb.SealedInventory(inventory=seal.body, signature=seal.signature, certificates=seal.certificates)


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


def _at_most(n: int, limit: int, where: str, what: str) -> None:
    if n > limit:
        raise TooLarge(f"{where}: {n} {what}; at most {limit}")


def _rooms(rows: Iterable[pb.DomainRoom], where: str) -> tuple[DomainRoom, ...]:
    """The domains the rows list, each row's room repeated as many times as it counts (no copy per domain)."""
    rooms: list[DomainRoom] = []
    for i, d in enumerate(rows):
        at = f"{where}.domains[{i}]"
        if d.domains < 1:
            raise InputError(f"{at}.domains: {d.domains} is not a count of domains")
        _at_most(len(rooms) + d.domains, bounds.MAX_DOMAINS, f"{where}.domains", "domains")
        room = DomainRoom(
            _name(d.platform, f"{at}.platform"),
            _count(d.gpus_free, f"{at}.gpusFree"),
            _count(d.largest_pods, f"{at}.largestPods"),
            _count(d.largest_gpus_per_pod, f"{at}.largestGpusPerPod"),
        )
        rooms.extend([room] * d.domains)
    return tuple(rooms)


@dataclass(frozen=True)
class Sealed:
    """An inventory as received: parsed (in C), its bounds and its stamp checked, its rows not yet read. Enough to
    tell whether it is wanted (newer than what is held) and whose it is (``authorship``) before paying for the
    rest (``inventory``)."""

    message: pb.RegionInventory
    seal: Seal
    where: str  # its place in the message, for errors: ``inventories[2]``

    @property
    def origin(self) -> str:
        return self.message.origin

    @property
    def generation(self) -> int:
        return self.message.generation


def sealed(msg: pb.SealedInventory, where: str) -> Sealed:
    """``msg`` parsed within the bounds, its origin and stamp checked; TooLarge or InputError naming the field."""
    _at_most(len(msg.inventory), bounds.MAX_INVENTORY_BYTES, f"{where}.inventory", "bytes")
    _at_most(len(msg.signature), bounds.MAX_SIGNATURE_BYTES, f"{where}.signature", "bytes")
    _at_most(len(msg.certificates), bounds.MAX_CERTIFICATES, f"{where}.certificates", "certificates")
    for i, der in enumerate(msg.certificates):
        _at_most(len(der), bounds.MAX_CERTIFICATE_BYTES, f"{where}.certificates[{i}]", "bytes")
    try:
        inner = pb.RegionInventory.FromString(msg.inventory)
    except DecodeError:
        raise InputError(f"{where}.inventory: not a kilter.v1.RegionInventory") from None
    _at_most(len(inner.domains), bounds.MAX_ROOMS, f"{where}.domains", "rows")
    _at_most(len(inner.headroom), bounds.MAX_CLUSTER_QUEUES, f"{where}.headroom", "ClusterQueues")
    _at_most(len(inner.local_queues), bounds.MAX_LOCAL_QUEUES, f"{where}.localQueues", "LocalQueues")
    _name(inner.origin, f"{where}.origin")
    if inner.generation < 0:
        raise InputError(f"{where}.generation: must not be negative")
    if not math.isfinite(inner.produced_at) or inner.produced_at < 0:
        raise InputError(f"{where}.producedAt: {inner.produced_at} is not a time")
    return Sealed(inner, Seal(msg.inventory, msg.signature, tuple(msg.certificates)), where)


def inventory(got: Sealed) -> RegionInventory:
    """The inventory ``got`` carries, every row and queue checked (InputError naming the field), its seal kept to
    relay. The Python-level cost of a message is here: read only what will be kept."""
    msg, where = got.message, got.where
    rooms = _rooms(msg.domains, where)
    headroom = {
        _name(q, f"{where}.headroom"): _count(max(0, n), f"{where}.headroom[{q[:80]}]") for q, n in msg.headroom.items()
    }
    queues = {
        _name(lq, f"{where}.localQueues", limit=MAX_QUEUE_KEY): _name(cq, f"{where}.localQueues[{lq[:80]}]")
        for lq, cq in msg.local_queues.items()
    }
    return RegionInventory(msg.origin, msg.generation, msg.produced_at, rooms, headroom, queues, got.seal)


def check_digest(digest: Mapping[str, int], where: str) -> dict[str, int]:
    _at_most(len(digest), bounds.MAX_REGIONS, where, "regions")
    for origin, generation in digest.items():
        _name(origin, f"{where}")
        if generation < 0:
            raise InputError(f"{where}[{origin[:80]}]: generation must not be negative")
    return dict(digest)


@dataclass(frozen=True)
class Exchange:
    """What one exchange message says: the sender's digest and the inventories it carries, each as sealed."""

    region: str
    digest: dict[str, int]
    inventories: list[Sealed]


def read(raw: bytes, kind: Kind) -> Exchange:
    """An exchange message from its bytes, every bound checked before what it bounds is decoded, and every
    inventory's stamp; its rows are read by ``inventory``, for the ones wanted."""
    _at_most(len(raw), bounds.MAX_MESSAGE_BYTES, "message", "bytes")
    try:
        msg = kind.FromString(raw)
    except DecodeError:
        raise InputError(f"message: not a {kind.DESCRIPTOR.full_name}") from None
    _at_most(len(msg.inventories), bounds.MAX_REGIONS, "inventories", "inventories (one per region)")
    digest = check_digest(msg.digest, "digest")
    inventories = [sealed(m, f"inventories[{i}]") for i, m in enumerate(msg.inventories)]
    return Exchange(msg.region[:MAX_NAME], digest, inventories)


def pack(inventories: Iterable[RegionInventory], *, budget: int) -> list[pb.SealedInventory]:
    """As many of ``inventories`` as fit ``budget`` bytes, in order (at least one): a sender holding more than one
    message carries sends the rest in the next rounds, since the receiver's digest still asks for them."""
    out: list[pb.SealedInventory] = []
    for inv in inventories:
        msg = sealed_message(inv)
        budget -= msg.ByteSize() + _ENVELOPE
        if out and budget < 0:
            break
        out.append(msg)
    return out


def encode(
    kind: Kind,
    region: str,
    digest: Mapping[str, int],
    inventories: Iterable[RegionInventory],
    *,
    budget: int = bounds.MAX_MESSAGE_BYTES,
) -> bytes:
    """An exchange message within ``budget`` bytes: ``region``, ``digest``, and what of ``inventories`` fits."""
    head = kind(region=region, digest=dict(digest))
    head.inventories.extend(pack(inventories, budget=budget - head.ByteSize()))
    return head.SerializeToString()

"""The ``pool`` section of kilter's Configuration: this region, its peers, and how often they talk.

File-only (a list of peers is no flag), checked when the Configuration is
read: names are region names, unique, none the region itself; the time to
live is several exchange rounds long; the exchange runs over mutual TLS
unless ``insecure`` says otherwise (for a trial on one machine), since an
inventory decides where jobs go, and then no two peers are known by one
certificate name, since that name says whose inventories a seal vouches for.
"""

from __future__ import annotations

from dataclasses import dataclass

from kilter.model.annotations import parse_regions
from kilter.model.errors import InputError
from kilter.pool.bounds import MAX_REGIONS
from kilter.pool.peers import DEFAULT_TTL_S
from kilter.topology.regions import NOMINATE_AT_MOST

__all__ = ["DEFAULT_DEADLINE_S", "MAX_NOMINATIONS", "MIN_TTL_ROUNDS", "PeerSettings", "PoolSettings"]

MAX_NOMINATIONS = 20
"""Kueue v0.16's limit on ``nominatedClusterNames`` (``MaxItems``)."""
DEFAULT_DEADLINE_S = 60.0
"""How long nominated clusters have to admit before the gang is ranked anew: a worker's Kueue admits within
seconds when the room its inventory showed is still there, so a minute without admission means it was taken."""

MIN_TTL_ROUNDS = 3
"""The time to live spans at least this many exchange rounds: one lost round must not age a region out."""


@dataclass(frozen=True)
class PeerSettings:
    """A peer region: its name, its kilter's gRPC ``host:port``, and the MultiKueueClusters that reach it."""

    name: str
    address: str
    clusters: tuple[str, ...] = ()  # empty: one MultiKueueCluster named like the region
    server_name: str = ""  # the name its certificate carries, when not the address's host

    @property
    def cluster_names(self) -> tuple[str, ...]:
        return self.clusters or (self.name,)

    @property
    def certificate_name(self) -> str:
        """The name its certificate carries: what TLS checks when calling it, and what its seals must name."""
        return self.server_name or self.address.rpartition(":")[0].removeprefix("[").removesuffix("]")


@dataclass(frozen=True)
class PoolSettings:
    region: str
    peers: tuple[PeerSettings, ...] = ()
    clusters: tuple[str, ...] = ()  # MultiKueueClusters that reach this region's own workers
    exchange_interval_s: float = 1.0
    ttl_s: float = DEFAULT_TTL_S
    call_timeout_s: float = 2.0
    insecure: bool = False
    dispatch: bool = True
    dispatch_interval_s: float = 2.0
    admit_deadline_s: float = DEFAULT_DEADLINE_S
    nominate_at_most: int = NOMINATE_AT_MOST

    def __post_init__(self) -> None:
        if parse_regions(self.region, what="pool.region") != (self.region,):
            raise InputError(f"pool.region: must be one region name, got {self.region[:60]!r}")
        if len(self.peers) >= MAX_REGIONS:
            raise InputError(f"pool.peers: {len(self.peers)} peers; a pool has at most {MAX_REGIONS} regions")
        seen = {self.region}
        signers: dict[str, str] = {}
        for i, peer in enumerate(self.peers):
            where = f"pool.peers[{i}]"
            if parse_regions(peer.name, what=f"{where}.name") != (peer.name,):
                raise InputError(f"{where}.name: must be one region name")
            if peer.name in seen:
                raise InputError(f"{where}.name: {peer.name} is named twice (or is this region)")
            seen.add(peer.name)
            host, _, port = peer.address.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) <= 65535:
                raise InputError(f"{where}.address: must be HOST:PORT, got {peer.address!r}")
            if not self.insecure and signers.setdefault(peer.certificate_name, peer.name) != peer.name:
                raise InputError(
                    f"{where}: its certificate name {peer.certificate_name} is also "
                    f"{signers[peer.certificate_name]}'s: one certificate could seal inventories for both "
                    "(give each its own serverName)"
                )
        owners: dict[str, str] = {}
        for region, clusters in ((self.region, self.clusters), *((p.name, p.cluster_names) for p in self.peers)):
            for cluster in clusters:
                if parse_regions(cluster, what="pool: a MultiKueueCluster name") != (cluster,):
                    raise InputError(f"pool: {cluster[:60]!r} is not a MultiKueueCluster name")
                if owners.setdefault(cluster, region) != region:
                    raise InputError(f"pool: MultiKueueCluster {cluster} is named for {owners[cluster]} and {region}")
        for field, seconds in (
            ("exchangeInterval", self.exchange_interval_s),
            ("callTimeout", self.call_timeout_s),
            ("dispatch.interval", self.dispatch_interval_s),
            ("dispatch.admitDeadline", self.admit_deadline_s),
        ):
            if not 0 < seconds < float("inf"):
                raise InputError(f"pool.{field}: must be above zero and finite")
        if not self.ttl_s >= MIN_TTL_ROUNDS * self.exchange_interval_s:
            raise InputError(
                f"pool.ttl: must be at least {MIN_TTL_ROUNDS} exchange intervals "
                f"({MIN_TTL_ROUNDS * self.exchange_interval_s:g}s), or one lost round ages a region out"
            )
        if not 1 <= self.nominate_at_most <= MAX_NOMINATIONS:
            raise InputError(f"pool.dispatch.nominateAtMost: must be 1 to {MAX_NOMINATIONS} (Kueue's limit)")

    @property
    def members(self) -> frozenset[str]:
        return frozenset({self.region, *(p.name for p in self.peers)})

    def certificate_names(self) -> dict[str, str]:
        """Peer region -> the name its certificate must carry for its inventories to be taken."""
        return {p.name: p.certificate_name for p in self.peers}

    def cluster_regions(self) -> dict[str, str]:
        """MultiKueueCluster name -> the region it reaches."""
        out = {c: self.region for c in self.clusters}
        for peer in self.peers:
            out.update({c: peer.name for c in peer.cluster_names})
        return out

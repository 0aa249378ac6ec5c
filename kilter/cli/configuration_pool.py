"""The Configuration's ``pool`` section: the global pool's region, peers and dispatch (docs/pool.md).

Apart from the flat sections because it is file-only: a list of peers has
no flag, so it maps to one ``ServeConfig`` field, ``pool``, whole.
"""

from __future__ import annotations

import math

import pydantic
from pydantic.alias_generators import to_camel

from kilter.model.durations import parse_duration
from kilter.model.errors import InputError
from kilter.pool.settings import PeerSettings, PoolSettings

__all__ = ["POOL_EXAMPLE", "PoolDispatch", "PoolPeer", "PoolSection", "check_duration"]


def check_duration(value: object, field: str) -> None:
    """ValueError (pydantic reports it under the field's path) unless ``value`` reads as a finite duration."""
    try:
        seconds = parse_duration(str(value), path=field)
    except InputError as e:
        raise ValueError(e.message) from None
    if not math.isfinite(seconds):
        raise ValueError(f"{value!r} is not a finite duration")


DURATIONS = frozenset({"interval", "admit_deadline", "exchange_interval", "ttl", "call_timeout"})


class _PoolPart(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True, alias_generator=to_camel)

    @pydantic.field_validator("*", mode="after")
    @classmethod
    def _durations_parse(cls, value: object, info: pydantic.ValidationInfo) -> object:
        """A duration that does not read is refused here, so its error carries the field's path."""
        if info.field_name in DURATIONS:
            check_duration(value, str(info.field_name))
        return value


class PoolPeer(_PoolPart):
    """A peer region of the pool."""

    name: str
    address: str
    clusters: list[str] = []
    server_name: str = ""


class PoolDispatch(_PoolPart):
    """kilter as MultiKueue's external dispatcher for this region's Workloads."""

    enabled: bool = True
    interval: str = "2s"
    admit_deadline: str = "1m"
    nominate_at_most: int = PoolSettings.nominate_at_most


class PoolSection(_PoolPart):
    """The global pool: this region, its peers, how often they exchange inventories, and dispatch (file only:
    see docs/pool.md)."""

    region: str
    clusters: list[str] = []
    peers: list[PoolPeer] = []
    exchange_interval: str = "1s"
    ttl: str = "30s"
    call_timeout: str = "2s"
    insecure: bool = False
    dispatch: PoolDispatch = PoolDispatch()

    def settings(self) -> PoolSettings:
        def seconds(value: str, where: str) -> float:
            return parse_duration(value, path=f"pool.{where}")

        return PoolSettings(
            region=self.region,
            peers=tuple(PeerSettings(p.name, p.address, tuple(p.clusters), p.server_name) for p in self.peers),
            clusters=tuple(self.clusters),
            exchange_interval_s=seconds(self.exchange_interval, "exchangeInterval"),
            ttl_s=seconds(self.ttl, "ttl"),
            call_timeout_s=seconds(self.call_timeout, "callTimeout"),
            insecure=self.insecure,
            dispatch=self.dispatch.enabled,
            dispatch_interval_s=seconds(self.dispatch.interval, "dispatch.interval"),
            admit_deadline_s=seconds(self.dispatch.admit_deadline, "dispatch.admitDeadline"),
            nominate_at_most=self.dispatch.nominate_at_most,
        )


POOL_EXAMPLE = """\
# The global pool (docs/pool.md): off unless given. This region's name, the MultiKueueClusters that reach its
# own workers, and its peers (their kilter's gRPC address, the MultiKueueClusters that reach them). The exchange
# is mutual TLS with the listeners' certificate and grpcClientCA; insecure: true allows plaintext (a trial).
# Each region signs its inventory with its certificate's key: that certificate must name the region as its peers
# dial it (serverName, else the address's host), and no two regions may share one.
# pool:
#   region: eu-west
#   clusters: []
#   peers:
#   - {name: us-east, address: "kilter.us-east.example.com:9090", clusters: [us-east], serverName: ""}
#   exchangeInterval: 1s
#   ttl: 30s
#   callTimeout: 2s
#   insecure: false
#   dispatch: {enabled: true, interval: 2s, admitDeadline: 1m, nominateAtMost: 3}"""

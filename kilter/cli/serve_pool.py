"""``kilter serve``'s part in the global pool: the exchange served and run, the dispatcher, their metrics.

Built from the Configuration's ``pool`` section (``kilter.pool.settings``).
The exchange is served on the gRPC listener beside ``kilter.v1.Placement``
and judged by the same rule (mutual TLS, or the trusted networks with
``insecure``); peers are called with the listener's own certificate and
``grpcClientCA`` as the CA their certificates must chain to, so one pool
CA is all the pool needs. The same key seals this region's inventory and
the same CA checks every other region's seal (``pool.authorship``). One
reader and one backoff serve both sides of the exchange. The dispatcher
writes only from the leader.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kilter.api.server import Service
from kilter.cli.serve_config import ServeConfig
from kilter.cli.serve_grpc import peer_client
from kilter.kube.api import ApiServer
from kilter.pool.authorship import Authors, Sealer
from kilter.pool.backoff import Backoff
from kilter.pool.dispatch import Dispatcher
from kilter.pool.exchange import ExchangeCounts, Gossip, Peer, PoolServicer, Reader, pool_service
from kilter.pool.identity import PoolFiles
from kilter.pool.peers import PeerTable
from kilter.pool.publish import StorePublisher
from kilter.pool.settings import PoolSettings
from kilter.state.store import ClusterStore

__all__ = ["PoolParts", "PoolReading", "pool_parts"]


@dataclass
class PoolParts:
    """What ``kilter serve`` runs for the pool: the exchange's service and rounds, and the dispatcher."""

    table: PeerTable
    service: Service
    gossip: Gossip
    dispatcher: Dispatcher | None
    servicer: PoolServicer


def _pool_files(config: ServeConfig) -> PoolFiles | None:
    if config.tls_cert_file is None or config.tls_key_file is None or config.grpc_client_ca is None:
        return None
    return PoolFiles(config.tls_cert_file, config.tls_key_file, config.grpc_client_ca)


def pool_parts(
    config: ServeConfig,
    pool: PoolSettings,
    store: ClusterStore,
    api: ApiServer | None,
    is_writer: Callable[[], bool],
) -> PoolParts:
    table = PeerTable(pool.region, ttl_s=pool.ttl_s, members=pool.members)
    counts = ExchangeCounts()
    rule = config.grpc_trust_rule

    def trusted(peer: str) -> bool:
        return rule({"client": peer_client(peer)})

    files = None if pool.insecure else _pool_files(config)
    peers = [Peer(p.name, p.address, files, p.server_name) for p in pool.peers]
    reader = Reader(Authors(pool.region, pool.certificate_names(), files).judge)
    gossip = Gossip(
        table,
        peers,
        StorePublisher(store),
        interval_s=pool.exchange_interval_s,
        call_timeout_s=pool.call_timeout_s,
        counts=counts,
        is_writer=is_writer,
        sealer=Sealer(files),
        reader=reader,
        backoff=Backoff(pool.exchange_interval_s, pool.ttl_s),
    )
    servicer = PoolServicer(
        table, trusted, counts, reader=reader, backoff=Backoff(pool.exchange_interval_s, pool.ttl_s)
    )
    dispatcher = None
    if pool.dispatch and api is not None:
        dispatcher = Dispatcher(
            store,
            api,
            table,
            pool.cluster_regions(),
            interval_s=pool.dispatch_interval_s,
            deadline_s=pool.admit_deadline_s,
            at_most=pool.nominate_at_most,
            is_writer=is_writer,
        )
    return PoolParts(table, pool_service(servicer), gossip, dispatcher, servicer)


class PoolReading(Collector):
    """The pool on ``/metrics``: regions heard and fresh, exchange calls and bytes, nominations written."""

    def __init__(self, parts: PoolParts, wall: Callable[[], float] = time.time) -> None:
        self.parts = parts
        self.wall = wall

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        table, counts = self.parts.table, self.parts.gossip.counts
        now = self.wall()
        age = GaugeMetricFamily(
            "kilter_pool_inventory_age_seconds",
            "Age of the newest inventory held of each region (its own clock); past the TTL it is not used",
            labels=["region"],
        )
        generation = GaugeMetricFamily(
            "kilter_pool_inventory_generation",
            "Generation of the newest inventory held of each region",
            labels=["region"],
        )
        for origin, inv in sorted(table.held.items()):
            age.add_metric([origin], max(0.0, now - inv.produced_at))
            generation.add_metric([origin], inv.generation)
        yield age
        yield generation
        yield GaugeMetricFamily(
            "kilter_pool_regions_fresh",
            "Regions whose inventory is fresh, this one included",
            value=len(table.fresh(now)),
        )
        calls = CounterMetricFamily(
            "kilter_pool_exchanges",
            "Exchange calls to each peer, by outcome: ok, failed, over-bounds (its answer), backed-off (not made)",
            labels=["peer", "outcome"],
        )
        for (peer, outcome), n in sorted(counts.calls.items()):
            calls.add_metric([peer, outcome], n)
        yield calls
        moved = CounterMetricFamily(
            "kilter_pool_exchange_bytes",
            "Bytes of exchange messages this region sent and received as caller",
            labels=["direction"],
        )
        moved.add_metric(["sent"], counts.bytes_sent)
        moved.add_metric(["received"], counts.bytes_received)
        yield moved
        yield CounterMetricFamily(
            "kilter_pool_exchanges_refused",
            "Exchange calls this region refused: an untrusted caller, a malformed inventory, a message over the "
            "pool's bounds, or a caller backed off for one",
            value=counts.refused,
        )
        yield CounterMetricFamily(
            "kilter_pool_requests_over_bounds",
            "Exchange requests over the pool's bounds (each backs its caller off; answers over them count as "
            'kilter_pool_exchanges_total{outcome="over-bounds"})',
            value=counts.over_bounds,
        )
        backed_off = GaugeMetricFamily(
            "kilter_pool_backed_off",
            "Peers not called (side=peer) and callers not answered (side=caller) now, after going over the bounds",
            labels=["side"],
        )
        backed_off.add_metric(["peer"], self.parts.gossip.backoff.waiting(now))
        backed_off.add_metric(["caller"], self.parts.servicer.backoff.waiting(now))
        yield backed_off
        yield CounterMetricFamily(
            "kilter_pool_inventories_forged",
            "Inventories dropped as not written by their origin: unsigned, tampered with, or sealed by a "
            "certificate that does not name that region or does not chain to the pool CA",
            value=counts.forged,
        )
        dispatcher = self.parts.dispatcher
        if dispatcher is not None:
            written = CounterMetricFamily(
                "kilter_pool_nominations",
                "Workload nominations: nominated, cleared, conflict, failed, unplaceable",
                labels=["outcome"],
            )
            for outcome in ("nominated", "cleared", "conflict", "failed", "unplaceable"):
                written.add_metric([outcome], dispatcher.written.get(outcome, 0))
            yield written

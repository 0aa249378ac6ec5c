"""What the extender's ``/metrics`` reads at scrape time from the objects that count: the gang book, the fleet's
spares, the Volcano verbs' body readers.

Each is a ``Collector``: nothing on a request's path updates a metric for
them, and counters that the objects keep as plain integers (plans, repairs,
decodes) are exposed as Prometheus counters (``_total``) here.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kilter.extenders.volcano import VolcanoExtender
from kilter.gangs import GangBook
from kilter.state.store import ClusterStore
from kilter.topology import spares

__all__ = ["GangReading", "SpareReading", "VolcanoReading"]


class GangReading(Collector):
    """The gang book's counts since start, read at scrape time: plans by outcome, replans, repairs by rung, and
    failed reloads of the state's source."""

    def __init__(self, gangs: GangBook) -> None:
        self.gangs = gangs

    def collect(self) -> Iterator[CounterMetricFamily]:
        g = self.gangs
        plans = CounterMetricFamily(
            "kilter_gang_plans",
            "Gang plans since start: placed (made and fitting), unplaceable (made, not fitting now: the gang "
            "waits), adopted (taken up from records in the cluster), refused (a stranger asked, or a cap)",
            labels=["outcome"],
        )
        plans.add_metric(["placed"], max(0, g.planned - g.unplaceable - g.adopted))
        plans.add_metric(["unplaceable"], g.unplaceable)
        plans.add_metric(["adopted"], g.adopted)
        plans.add_metric(["refused"], g.refused)
        yield plans
        yield CounterMetricFamily("kilter_gang_replans", "Gang plans dropped and made again", value=g.replanned)
        repairs = CounterMetricFamily(
            "kilter_gang_repairs",
            "Ranks of running gangs replaced after a node failed, by the repair ladder's rung",
            labels=["rung"],
        )
        for rung, count in sorted(g.repairs.items()):
            repairs.add_metric([rung], count)
        yield repairs
        kept = CounterMetricFamily(
            "kilter_gang_plans_around_reservations",
            "Gang plans that met a kept reservation of another gang (--reservations on): steered (planned again "
            "away from its domains) or waiting (every plan would have delayed it)",
            labels=["outcome"],
        )
        kept.add_metric(["steered"], g.steered)
        kept.add_metric(["waiting"], g.turned_away)
        yield kept
        yield CounterMetricFamily(
            "kilter_state_reload_failures",
            "Reloads of the state's source (the snapshot file) that failed since start; the state was kept",
            value=g.store.feed_failures,
        )


class SpareReading(Collector):
    """The spare nodes of each platform (``topology.spares``), read from the fleet at scrape time."""

    def __init__(self, store: ClusterStore) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        rows = spares.by_platform(self.store.fleet())
        families = (
            ("kilter_spare_nodes_wanted", "Spare nodes the settings ask for, summed over the platform's domains"),
            ("kilter_spare_nodes_held", "Healthy, wholly free nodes kept out of new plans now"),
            ("kilter_spare_nodes_used", "Spare places busy nodes fill (repairs of running gangs, mostly)"),
            ("kilter_spare_nodes_short", "Spare places a domain lacks healthy nodes for"),
        )
        for name, doc in families:
            family = GaugeMetricFamily(name, doc, labels=["platform"])
            for row in rows:
                family.add_metric([row.platform], getattr(row, name.removeprefix("kilter_spare_nodes_")))
            yield family
        lent = GaugeMetricFamily(
            "kilter_spare_domains_lent",
            "Domains asking for spares that lend them to preemptible pods (kilter.dev/spares-for-preemptible)",
            labels=["platform"],
        )
        for row in rows:
            lent.add_metric([row.platform], row.lent)
        yield lent


class VolcanoReading(Collector):
    """How the Volcano verbs read their bodies, from the extender's own counters (read at scrape time)."""

    def __init__(self, volcano: VolcanoExtender) -> None:
        self.volcano = volcano

    def collect(self) -> Iterator[CounterMetricFamily]:
        whole = CounterMetricFamily(
            "kilter_volcano_whole_decodes",
            "Volcano bodies decoded whole instead of by their header paths, by body kind",
            labels=["kind"],
        )
        for kind, count in sorted(self.volcano.whole_decodes.items()):
            whole.add_metric([kind], count)
        yield whole
        streamed = CounterMetricFamily(
            "kilter_volcano_prioritize_streamed",
            "prioritize bodies read while they arrived: answered from that reading, or read again whole",
            labels=["outcome"],
        )
        streamed.add_metric(["answered"], self.volcano.streamed_answers)
        streamed.add_metric(["fallback"], self.volcano.streamed_fallbacks)
        yield streamed

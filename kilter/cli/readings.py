"""What ``kilter serve`` adds to ``/metrics`` beside the servers' own series: state lag, leadership, certificate
expiry, AdmissionCheck decisions.

Each is read at scrape time from the object that knows it (the live feed, the
writer gate, the certificate files, the controller), so nothing on a request's
path pays for it. Names follow Prometheus' conventions: units in the name,
``_total`` counters, histograms in seconds. ``config/components/monitoring``
(dashboard and alerts) uses them; ``tests/config/test_monitoring.py`` scrapes a
running ``kilter serve`` for every series the dashboard and the alerts name.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from kilter.lifecycle.controller import LifecycleController
from kilter.state.live import LiveFeed
from kilter.webhooks.admissioncheck import Controller

__all__ = ["AdmissionCheckReading", "CertificateReading", "LeaderReading", "LifecycleReading", "StateReading"]


class StateReading(Collector):
    """The live feed: how long watch events wait before the store has them, and how often each resource was
    listed again (a relist follows a watch the server ended with 410 Gone, or a reconnect that could not
    resume)."""

    def __init__(self, live: LiveFeed) -> None:
        self.live = live

    def collect(self) -> Iterator[HistogramMetricFamily | CounterMetricFamily]:
        lag = self.live.lag
        yield HistogramMetricFamily(
            "kilter_state_event_lag_seconds",
            "Time from a reflector receiving watch events (or a list) to the store holding them",
            buckets=lag.buckets(),
            sum_value=lag.sum_s,
        )
        relists = CounterMetricFamily(
            "kilter_state_relists",
            "Lists of a resource after its first (the watch could not resume)",
            labels=["resource"],
        )
        watches = CounterMetricFamily("kilter_state_watches", "Watches opened, by resource", labels=["resource"])
        for r in self.live.reflectors:
            relists.add_metric([r.resource.name], max(0, r.lists - 1))
            watches.add_metric([r.resource.name], r.watches)
        yield relists
        yield watches


class LeaderReading(Collector):
    """1 while this replica writes (holds its Lease, or its kube-scheduler does); 0 while it stands by."""

    def __init__(self, is_writer: Callable[[], bool], lease: str) -> None:
        self.is_writer = is_writer
        self.lease = lease

    def collect(self) -> Iterator[GaugeMetricFamily]:
        leader = GaugeMetricFamily(
            "kilter_leader", "1 while this replica is the one that writes (plans, statuses, Events)", labels=["lease"]
        )
        leader.add_metric([self.lease], 1.0 if self.is_writer() else 0.0)
        yield leader


class CertificateReading(Collector):
    """When the certificate the TLS listeners serve expires, re-read when its file changes (a renewal)."""

    def __init__(self, cert: Path) -> None:
        self.cert = cert
        self._seen: tuple[float, int] | None = None
        self._expiry: float | None = None

    def _read(self) -> float | None:
        try:
            stat = os.stat(self.cert)
        except OSError:
            return self._expiry
        stamp = (stat.st_mtime, stat.st_size)
        if stamp != self._seen:
            from kilter.webhooks.certs import expiry  # cryptography, only where TLS is served

            self._seen = stamp
            when = expiry(self.cert.read_bytes())
            self._expiry = when.timestamp() if when is not None else None
        return self._expiry

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "kilter_certificate_expiry_timestamp_seconds",
            "When the certificate of kilter's TLS listeners (webhooks, gRPC) expires, in Unix seconds",
            labels=["file"],
        )
        when = self._read()
        if when is not None:
            family.add_metric([str(self.cert)], when)
        yield family


class AdmissionCheckReading(Collector):
    """The AdmissionCheck controller's decisions written to Workloads, by state: kilter's quota-side verdicts
    for Kueue (Volcano's are ``kilter_extender_decisions_total{verb="jobEnqueueable"}``)."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "kilter_admission_check_decisions",
            "Workload admission-check states kilter wrote: Ready, Pending, Retry, Rejected",
            labels=["state"],
        )
        for state in ("Ready", "Pending", "Retry", "Rejected"):
            family.add_metric([state], self.controller.decided[state])
        yield family
        yield CounterMetricFamily(
            "kilter_admission_check_write_errors",
            "Status writes the API server refused or could not take (retried next round)",
            value=self.controller.errors,
        )


class LifecycleReading(Collector):
    """The lifecycle controller's transitions written, by the state moved to, and its refused writes."""

    def __init__(self, controller: LifecycleController) -> None:
        self.controller = controller

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        family = CounterMetricFamily(
            "kilter_lifecycle_transitions", "Node lifecycle transitions written, by the state moved to", labels=["to"]
        )
        for state in ("degraded", "repairing", "qualifying", "ready"):
            family.add_metric([state], self.controller.moved[state])
        yield family
        yield CounterMetricFamily(
            "kilter_lifecycle_write_conflicts",
            "Node label writes refused because the node changed since the decision (judged again next round)",
            value=self.controller.conflicts,
        )
        yield CounterMetricFamily(
            "kilter_lifecycle_write_errors",
            "Node label writes refused otherwise (403: the ServiceAccount lacks the lifecycle component's role)",
            value=self.controller.errors,
        )
        requests = self.controller.requests
        if requests is not None:
            states = GaugeMetricFamily(
                "kilter_maintenance_requests",
                "Maintenance requests (kilter.dev/maintenance on nodes), by where they stand",
                labels=["state"],
            )
            counts = requests.counts()
            for state in ("running", "stopped", "done"):
                states.add_metric([state], counts[state])
            yield states

"""What ``kilter serve`` runs with: one frozen record, read from its flags in one place.

``build_app`` and ``run`` take a ``ServeConfig``, never the parser's
Namespace, so that tests, the bench and the demo's scheduler stand-in build
the very value the command line builds (``ServeConfig(snapshot=path)``,
``dataclasses.replace``) and a misspelt field is a type error, not a silent
default. The flags' defaults are this record's defaults. Durations are read
from their flags here, once; a record that could not serve (a body limit
below 1 KiB) is refused when it is made.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from kilter.cli.listeners import ListenerLimits, TrustRule, split_networks
from kilter.cli.logs import LogFormat
from kilter.cli.spare_flag import read_spare_nodes
from kilter.cli.split_wait_flags import RESERVATIONS_DEFAULT, check_split_wait, split_wait_fields
from kilter.extenders.server import DEFAULT_MAX_BODY_BYTES, DEFAULT_VOLCANO_BODY_BYTES
from kilter.gangs import trust
from kilter.gangs.key_secret import DEFAULT_ROTATION_S, REREAD_INTERVAL_S
from kilter.lifecycle.plan_doc import MAX_SECONDS
from kilter.model.errors import InputError
from kilter.pool.settings import PoolSettings
from kilter.quota.policy import parse_duration
from kilter.quota.runtimes import WINDOW
from kilter.topology.split_wait import (
    DEFAULT_FACTOR,
    DEFAULT_MAX_S,
    DEFAULT_SPLIT_SLOWDOWN,
    SplitWait,
)

__all__ = [
    "DEFAULTS",
    "DEFAULT_KILTER_USER",
    "DEFAULT_LEASE",
    "DEFAULT_TRUSTED_NETWORKS",
    "MIN_BODY_BYTES",
    "MIN_RELOAD_INTERVAL_S",
    "LogLevel",
    "ServeConfig",
]

DEFAULT_LEASE = "kube-system/kilter"
DEFAULT_KILTER_USER = "system:serviceaccount:kube-system:kilter-scheduler"
MIN_BODY_BYTES = 1024  # below this not even a one-node filter body fits
MIN_RELOAD_INTERVAL_S = 0.01  # the file checks (snapshot, --config) must not spin the event loop

DEFAULT_TRUSTED_NETWORKS = ("127.0.0.0/8", "::1/128")
"""Loopback: kube-scheduler calls its kilter sidecar on 127.0.0.1, and kubectl port-forward arrives there too."""

LogLevel = Literal["debug", "info", "warning", "error"]


@dataclass(frozen=True)
class ServeConfig:
    """Every setting of ``kilter serve``; each field is the flag of the same name (``--http-port`` is ``http_port``)."""

    snapshot: Path | None = None
    """A snapshot file as the state, re-read when it changes (``--snapshot``)."""
    demo: bool = False
    """The embedded demo fleet as the state (``--demo``)."""
    platforms: Path | None = None
    """A YAML file adding or overriding catalog platforms; None: the built-in catalog."""
    health_signals: Path | None = None
    """A YAML file of the health signals that mark a GPU node unusable; None: ``topology.health.DEFAULTS``."""
    http_port: int = 8888
    """TCP port of the HTTP listener (extender, Volcano verbs, /metrics, /debug)."""
    address: str = "0.0.0.0"
    """Address both listeners bind; 0.0.0.0 is every interface."""
    webhook_port: int = 9443
    """TCP port of the HTTPS admission-webhook listener (started only with a certificate)."""
    tls_cert_file: Path | None = None
    """PEM certificate of the webhook listener; with ``tls_key_file`` it starts that listener."""
    tls_key_file: Path | None = None
    """PEM private key of ``tls_cert_file``."""
    http_tls: bool = False
    """Serve the HTTP listener over HTTPS too, with the same certificate."""
    http_client_ca: Path | None = None
    """PEM CA bundle: with ``http_tls``, the HTTP listener requires client certificates it signed (mutual TLS),
    and every caller that passes is trusted wherever it connects from."""
    grpc_port: int = 9090
    """TCP port of the gRPC listener (``kilter.v1.Placement``, health, reflection); 0 turns it off. TLS with
    ``tls_cert_file``/``tls_key_file`` when given, else plaintext."""
    grpc_client_ca: Path | None = None
    """PEM CA bundle: the gRPC listener requires client certificates it signed (needs the TLS files), and every
    caller that passes is trusted wherever it connects from."""
    trusted_networks: tuple[str, ...] = DEFAULT_TRUSTED_NETWORKS
    """CIDRs whose callers may use /scheduler/*, /volcano/* and /debug/* (by the peer address of the connection);
    loopback only by default. /healthz, /readyz and /metrics answer everyone."""
    probe_networks: tuple[str, ...] = ()
    """CIDRs the kubelet probes from (the node's: the manifests pass the hostIP): their connections may take the
    trusted reserve of the HTTP listener's cap, so probes get through; they are not trusted with the verbs."""
    kilter_user: tuple[str, ...] = ()
    """Users allowed to write kilter-only annotations; empty: kilter's service account only."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Largest ``/scheduler/*`` body read, in bytes (at least ``MIN_BODY_BYTES``): node names fit 8 MiB many times
    over; full-Node mode (kube-scheduler without ``nodeCacheCapable``) needs ~50 KB a node."""
    volcano_max_body_bytes: int = DEFAULT_VOLCANO_BODY_BYTES
    """Largest ``/volcano/*`` body read, in bytes: ``onSessionOpen`` carries the whole session (~110 MB at 5,000
    nodes)."""
    header_timeout_s: float = ListenerLimits.header_timeout_s
    """Seconds a connection has to deliver a request's headers (from its start, or a keep-alive request's first
    byte); then it is closed."""
    body_timeout_s: float = ListenerLimits.body_timeout_s
    """Seconds from a request's last header to its last body byte; then the connection is closed."""
    tls_handshake_timeout_s: float = ListenerLimits.handshake_timeout_s
    """Seconds a TLS handshake may take (and a TLS close waits for the peer's close_notify)."""
    keep_alive_timeout_s: float = ListenerLimits.keep_alive_s
    """Seconds an idle kept-alive connection stays open between requests."""
    max_connections: int = ListenerLimits.max_connections
    """Open connections per listener (HTTP, webhooks, gRPC), TLS handshakes included; more are closed at once,
    unanswered. Also the open gRPC streams (Health.Watch, WatchDecisions) kilter keeps."""
    kubeconfig: Path | None = None
    """A kubeconfig: watch its cluster as the state (unless a snapshot is given) and bind pods through it."""
    in_cluster: bool = False
    """The same with the API server of the cluster kilter's pod runs in (service account credentials)."""
    context: str | None = None
    """Context of ``kubeconfig``; None: its current-context."""
    leader_elect: bool = False
    """Campaign for ``lease``: only its holder writes (AdmissionCheck status, plans, Events)."""
    lease: str = DEFAULT_LEASE
    """NAMESPACE/NAME of the Lease of ``leader_elect``."""
    follow_lease: str | None = None
    """NAMESPACE/NAME of a kube-scheduler's Lease: write only while the scheduler in this pod holds it."""
    queues: Path | None = None
    """YAML of ClusterQueues, Cohorts and ResourceFlavors for Volcano queues when Kueue is not installed."""
    gang_timeout_s: float = 300.0
    """Seconds after which a gang's plan is dropped if not all its pods are bound."""
    plan_key_file: Path | None = None
    """Keys signing ``kilter.dev/plan`` records, one per line (the first signs); None: a random key per process."""
    plan_key_secret: str | None = None
    """NAMESPACE/NAME of a Secret holding those keys, which kilter creates, re-reads and rotates (needs a cluster);
    excludes ``plan_key_file``."""
    plan_key_rotation_s: float = DEFAULT_ROTATION_S
    """Seconds after which the writing replica puts a new key first in ``plan_key_secret``, keeping the previous."""
    max_namespace_gang_gpus: int | None = trust.Limits.namespace_gpus
    """GPUs the open plans of one namespace's gangs that no queue admitted yet may hold (``trust.Limits``; pods
    kilter's state does not show yet count as one namespace); None: no cap on gangs whose pods the state holds, and
    half the fleet's GPUs, as it is then, for pods it does not show yet."""
    max_namespace_gang_plans: int = trust.Limits.max_plans_per_namespace
    """Open plans of one namespace's gangs that no queue admitted yet; more such gangs wait (are refused)."""
    split_wait: float = DEFAULT_FACTOR
    """The factor of a preferred gang's wait for fewer domains where no job, ClusterQueue or Cohort sets
    ``kilter.dev/split-wait``: budget = factor x split_slowdown x extra domains x expected runtime; 0 never waits."""
    split_wait_max_s: float = DEFAULT_MAX_S
    """The longest such a wait lasts, in seconds, where nothing sets ``kilter.dev/split-wait-max``."""
    split_slowdown: float = DEFAULT_SPLIT_SLOWDOWN
    """How much slower a gang runs per extra scale-up domain (0.2: 20%), the rule's price of a split."""
    spare_nodes_per_domain: int = 0
    """Spare nodes per scale-up domain where no ResourceFlavor, ClusterQueue or Cohort sets more
    (``topology.spare_settings``); read by ``spare_flag.read_spare_nodes``."""
    spares_for_preemptible: bool = False
    """Lend the spares to preemptible pods where no ResourceFlavor, ClusterQueue or Cohort says ``"false"``."""
    reservations: bool = RESERVATIONS_DEFAULT
    """Keep reservations at every door: each ClusterQueue's oldest waiting gang bigger than a node is promised the
    domains that free soonest, and other work may start there only if it delays no promise (backfill)."""
    runtime_window: int = WINDOW
    """Finished Kueue Workloads per ClusterQueue and gang-size class whose median runtime a gang without a declared
    runtime is expected to take (``quota.runtimes.RuntimeLearner``)."""
    explain_records: int = 2_000
    """Decision records ``/debug/explain`` keeps in all (``extenders.explain.DecisionLog``)."""
    explain_per_pod: int = 4
    """Decision records kept per pod."""
    explain_nodes: int = 4_000_000
    """Node verdicts kept across all records, ~13 bytes each: bounds the log's memory whatever the requests hold."""
    reload_interval_s: float = 1.0
    """Seconds between checks of the snapshot file (and the ``--config`` file) for changes."""
    log_level: LogLevel = "info"
    """Logging threshold of every kilter and uvicorn logger."""
    log_format: LogFormat = "text"
    """``text`` for people, ``json`` (one object per line, with the gang/pod/workload keys) for a log pipeline."""
    lifecycle: bool = False
    """Run the lifecycle controller (``--lifecycle``): nodes moved through ``kilter.dev/lifecycle`` states by
    health over time and qualification results (needs an API server; the leader writes)."""
    lifecycle_failures: int = 3
    """Health failures within ``lifecycle_window_s`` that make a ready node degraded."""
    lifecycle_window_s: float = 600.0
    """The window those failures are counted in."""
    lifecycle_sustained_s: float = 300.0
    """How long one failure may last before the node is degraded without flapping."""
    lifecycle_suite: str = ""
    """The qualification suite whose ``passed`` makes a qualifying node ready; "" for any."""
    lifecycle_interval_s: float = 10.0
    """Time between two rounds of the lifecycle controller (and of the maintenance requests' drains)."""
    maintenance_max_unavailable: int = 1
    """Scale-up domains a maintenance request (``kilter.dev/maintenance`` on nodes) takes out at once."""
    maintenance_step_s: float = 7200.0
    """How long a requested domain is out once drained, re-qualification included (for its plan)."""
    maintenance_max_wait_s: float = 21600.0
    """The longest a request's step waits for jobs to end before it evicts them."""
    maintenance_eviction_timeout_s: float = 600.0
    """How long a refused eviction (a PodDisruptionBudget) is retried before the request stops and says why."""
    pool: PoolSettings | None = None
    """The global pool (the Configuration's ``pool`` section only): this region, its peers, dispatch."""

    def __post_init__(self) -> None:
        self._check_wiring()
        self._check_limits()

    def _check_wiring(self) -> None:
        """What must hold between the sources, listeners and Leases (also what a Configuration file may break)."""
        for flag, port in (("--http-port", self.http_port), ("--webhook-port", self.webhook_port)):
            if not 0 <= port <= 65535:
                raise InputError(f"{flag} must be 0 (any free port) to 65535, got {port}")
        if self.http_tls and (self.tls_cert_file is None or self.tls_key_file is None):
            raise InputError("--http-tls needs --tls-cert-file and --tls-key-file")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise InputError("--tls-cert-file and --tls-key-file go together")
        if self.leader_elect and self.follow_lease:
            raise InputError("--leader-elect and --follow-lease exclude each other: kilter either campaigns or follows")
        for flag, ref in (
            ("--lease", self.lease),
            ("--follow-lease", self.follow_lease),
            ("--plan-key-secret", self.plan_key_secret),
        ):
            namespace, _, name = (ref or "a/b").partition("/")
            if not namespace or not name or "/" in name:
                raise InputError(f"{flag} must be NAMESPACE/NAME, got {ref!r}")
        if self.demo and self.snapshot is not None:
            raise InputError("--demo and --snapshot exclude each other: the state comes from one place")
        if self.in_cluster and self.kubeconfig is not None:
            raise InputError("--in-cluster and --kubeconfig exclude each other: kilter talks to one API server")
        if self.pool is not None:
            if self.grpc_port == 0:
                raise InputError("pool: the exchange runs on the gRPC listener; --grpc-port must not be 0")
            mtls = self.tls_cert_file is not None and self.grpc_client_ca is not None
            if self.pool.insecure and self.tls_cert_file is not None:
                raise InputError(
                    "pool.insecure: the gRPC listener serves TLS with --tls-cert-file, so plaintext peers could not "
                    "call it; drop insecure and give --grpc-client-ca (mutual TLS)"
                )
            if not (mtls or self.pool.insecure):
                raise InputError(
                    "pool: the exchange needs mutual TLS (--tls-cert-file, --tls-key-file, --grpc-client-ca); "
                    "pool.insecure: true allows plaintext"
                )
            if self.pool.dispatch and self.kubeconfig is None and not self.in_cluster:
                raise InputError("pool.dispatch: writes Workloads, so it needs --kubeconfig or --in-cluster")

    def _check_limits(self) -> None:
        for flag, seconds in (
            ("--header-timeout", self.header_timeout_s),
            ("--body-timeout", self.body_timeout_s),
            ("--tls-handshake-timeout", self.tls_handshake_timeout_s),
            ("--keep-alive-timeout", self.keep_alive_timeout_s),
            ("--gang-timeout", self.gang_timeout_s),
        ):
            if not 0 < seconds < float("inf"):
                raise InputError(f"{flag} must be above zero and finite, got {seconds:g}s")
        if not MIN_RELOAD_INTERVAL_S <= self.reload_interval_s < float("inf"):
            raise InputError(f"--reload-interval must be at least {MIN_RELOAD_INTERVAL_S:g}s")
        if self.max_body_bytes < MIN_BODY_BYTES:
            raise InputError(f"--max-body-bytes must be at least {MIN_BODY_BYTES}")
        if self.volcano_max_body_bytes < MIN_BODY_BYTES:
            raise InputError(f"--volcano-max-body-bytes must be at least {MIN_BODY_BYTES}")
        if self.max_connections < 1:
            raise InputError("--max-connections must be at least 1")
        if self.http_client_ca is not None and not self.http_tls:
            raise InputError("--http-client-ca needs --http-tls: client certificates are checked in the TLS handshake")
        if not 0 <= self.grpc_port <= 65535:
            raise InputError(f"--grpc-port must be 0 (off) to 65535, got {self.grpc_port}")
        if self.grpc_client_ca is not None and (self.tls_cert_file is None or self.grpc_port == 0):
            raise InputError("--grpc-client-ca needs --tls-cert-file and --tls-key-file and a --grpc-port")
        if self.plan_key_file is not None and self.plan_key_secret is not None:
            raise InputError("--plan-key-file and --plan-key-secret exclude each other: the keys come from one place")
        if self.max_namespace_gang_gpus is not None and self.max_namespace_gang_gpus < 1:
            raise InputError("--max-namespace-gang-gpus must be at least 1")
        if self.max_namespace_gang_plans < 1:
            raise InputError("--max-namespace-gang-plans must be at least 1")
        if self.spare_nodes_per_domain < 0:
            raise InputError("--spare-nodes-per-domain must be at least 0")
        if self.lifecycle_failures < 1:
            raise InputError("--lifecycle-failures must be at least 1")
        if self.maintenance_max_unavailable < 1:
            raise InputError("lifecycle.maxUnavailableDomains must be at least 1")
        for key, seconds, least in (
            ("lifecycle.stepDuration", self.maintenance_step_s, 1.0),
            ("lifecycle.maxWait", self.maintenance_max_wait_s, 0.0),
            ("lifecycle.evictionTimeout", self.maintenance_eviction_timeout_s, 0.0),
        ):
            if not least <= seconds <= MAX_SECONDS:
                raise InputError(f"{key} must be from {least:g}s to a year, got {seconds:g}s")
        for flag, seconds in (
            ("--lifecycle-window", self.lifecycle_window_s),
            ("--lifecycle-sustained", self.lifecycle_sustained_s),
            ("lifecycle.interval", self.lifecycle_interval_s),
        ):
            if not 0 < seconds < float("inf"):
                raise InputError(f"{flag} must be above zero and finite, got {seconds:g}s")
        if self.lifecycle and ((self.kubeconfig is None and not self.in_cluster) or self.snapshot is not None):
            raise InputError(
                "--lifecycle writes node labels from the nodes it watches, so it needs --kubeconfig or --in-cluster "
                "as the state, not --snapshot"
            )
        for flag, count in (
            ("--runtime-window", self.runtime_window),
            ("--explain-records", self.explain_records),
            ("--explain-per-pod", self.explain_per_pod),
            ("--explain-nodes", self.explain_nodes),
        ):
            if count < 1:
                raise InputError(f"{flag} must be at least 1")
        least_s = self.gang_timeout_s + 2 * REREAD_INTERVAL_S
        if self.plan_key_secret is not None and self.plan_key_rotation_s <= least_s:
            raise InputError(
                f"--plan-key-rotation must be longer than --gang-timeout plus {2 * REREAD_INTERVAL_S:g}s "
                f"({least_s:g}s): a record must still verify after the next rotation"
            )
        TrustRule(self.trusted_networks), TrustRule(self.probe_networks, flag="--probe-networks")  # each CIDR parses
        check_split_wait(self.split_wait, self.split_wait_max_s, self.split_slowdown)

    @property
    def split_wait_rule(self) -> SplitWait:
        """The split-wait rule of gangs that nothing in the cluster sets one for (``kilter.gangs.wait_settings``)."""
        return SplitWait(self.split_wait, self.split_wait_max_s, self.split_slowdown)

    @property
    def trust_rule(self) -> TrustRule:
        """Who the HTTP listener answers on /scheduler/*, /volcano/* and /debug/*."""
        return TrustRule(self.trusted_networks, client_certs=self.http_client_ca is not None)

    @property
    def connection_rule(self) -> TrustRule:
        """Whose connections may take the HTTP listener's trusted reserve: trusted callers and ``probe_networks``."""
        return TrustRule((*self.trusted_networks, *self.probe_networks), client_certs=self.http_client_ca is not None)

    @property
    def grpc_trust_rule(self) -> TrustRule:
        """Who the gRPC listener answers on ``kilter.v1.Placement``: the trusted networks, or with
        ``grpc_client_ca`` every verified client. Health and reflection answer everyone."""
        return TrustRule(self.trusted_networks, client_certs=self.grpc_client_ca is not None)

    @property
    def listener_limits(self) -> ListenerLimits:
        """The deadlines and the connection cap every listener runs under."""
        return ListenerLimits(
            header_timeout_s=self.header_timeout_s,
            body_timeout_s=self.body_timeout_s,
            handshake_timeout_s=self.tls_handshake_timeout_s,
            keep_alive_s=self.keep_alive_timeout_s,
            max_connections=self.max_connections,
        )

    @property
    def gang_limits(self) -> trust.Limits:
        """The bounds of the gang book: the namespace caps of the flags, the rest ``trust.Limits``' own; with a
        snapshot as the state (``is_snapshot``) a plan for a pod it does not show yet lives as long as any plan
        (``gang_timeout_s``), since the snapshot may show the pod only minutes later."""
        limits = trust.Limits(
            max_plans_per_namespace=self.max_namespace_gang_plans, namespace_gpus=self.max_namespace_gang_gpus
        )
        return dataclasses.replace(limits, grace_s=self.gang_timeout_s) if self.is_snapshot else limits

    @property
    def is_snapshot(self) -> bool:
        """Whether the state is a snapshot (``--snapshot``, ``--demo``): minutes old, not a second like a list/watch
        feed, so what waits for the feed to show a pod waits for the next snapshot instead."""
        return self.demo or self.snapshot is not None

    @property
    def has_cluster(self) -> bool:
        """Whether an API server is connected (``kubeconfig`` or ``in_cluster``): binds, Events, plan records."""
        return self.kubeconfig is not None or self.in_cluster

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServeConfig:
        """The record of what ``kilter serve``'s parser read (``serve.add_parser``); the one reader of its flags."""
        return cls(**cls.fields_from_args(args))

    @staticmethod
    def fields_from_args(args: argparse.Namespace) -> dict[str, Any]:
        """Each field as its flag reads (durations in seconds, CIDRs split), before the checks between fields, which
        ``--config`` runs only once the file's fields are in (``configuration.merged``)."""
        split_wait = split_wait_fields(args)
        return dict(
            snapshot=args.snapshot,
            demo=args.demo,
            platforms=args.platforms,
            health_signals=args.health_signals,
            http_port=args.http_port,
            address=args.address,
            webhook_port=args.webhook_port,
            tls_cert_file=args.tls_cert_file,
            tls_key_file=args.tls_key_file,
            http_tls=args.http_tls,
            http_client_ca=args.http_client_ca,
            grpc_port=args.grpc_port,
            grpc_client_ca=args.grpc_client_ca,
            trusted_networks=split_networks(args.trusted_networks),
            probe_networks=split_networks(args.probe_networks),
            kilter_user=tuple(args.kilter_user),
            max_body_bytes=args.max_body_bytes,
            volcano_max_body_bytes=args.volcano_max_body_bytes,
            header_timeout_s=_positive(args.header_timeout, "--header-timeout"),
            body_timeout_s=_positive(args.body_timeout, "--body-timeout"),
            tls_handshake_timeout_s=_positive(args.tls_handshake_timeout, "--tls-handshake-timeout"),
            keep_alive_timeout_s=_positive(args.keep_alive_timeout, "--keep-alive-timeout"),
            max_connections=args.max_connections,
            kubeconfig=args.kubeconfig,
            in_cluster=args.in_cluster,
            context=args.context,
            leader_elect=args.leader_elect,
            lease=args.lease,
            follow_lease=args.follow_lease,
            queues=args.queues,
            gang_timeout_s=parse_duration(args.gang_timeout, path="--gang-timeout"),
            plan_key_file=args.plan_key_file,
            plan_key_secret=args.plan_key_secret,
            plan_key_rotation_s=parse_duration(args.plan_key_rotation, path="--plan-key-rotation"),
            max_namespace_gang_gpus=args.max_namespace_gang_gpus,
            max_namespace_gang_plans=args.max_namespace_gang_plans,
            split_wait=split_wait["split_wait"],
            split_wait_max_s=split_wait["split_wait_max_s"],
            split_slowdown=split_wait["split_slowdown"],
            spare_nodes_per_domain=read_spare_nodes(args.spare_nodes_per_domain),
            spares_for_preemptible=args.spares_for_preemptible,
            reservations=args.reservations == "on",
            lifecycle=args.lifecycle,
            reload_interval_s=parse_duration(args.reload_interval, path="--reload-interval"),
            log_level=cast(LogLevel, args.log_level),
            log_format=cast(LogFormat, args.log_format),
        )


def _positive(text: str, flag: str) -> float:
    """A duration flag that must be above zero (a zero deadline would close every connection at once)."""
    seconds = parse_duration(text, path=flag)
    if seconds <= 0:
        raise InputError(f"{flag} must be above zero, got {text!r}")
    return seconds


DEFAULTS = ServeConfig()
"""The defaults, which the flags show and parse to."""

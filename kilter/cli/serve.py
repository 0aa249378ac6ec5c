"""``kilter serve``: the scheduler extender, Volcano's extender verbs and the webhooks over one state.

State comes from the cluster (``--kubeconfig``/``--in-cluster``: list/watch,
bindings, Events and plan records through its API server), a snapshot file
(``--snapshot``, watched and reloaded) or ``--demo``. ``--config`` reads a
Configuration file under the flags given (``configuration``) and re-reads it
when it changes (``config_reload``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import socket
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import uvicorn
import uvloop

from kilter.cli import configuration, logs, readings, serve_grpc, serve_pool, sources
from kilter.cli.config_reload import ConfigReloader, book_settings
from kilter.cli.credential_reading import CredentialsReading
from kilter.cli.kubectl.served import ServedViews
from kilter.cli.listeners import Guard, ListenerReading, ensure_file_limit, listener_config
from kilter.cli.ports import check_free, listened
from kilter.cli.serve_config import DEFAULT_KILTER_USER, DEFAULTS, ServeConfig
from kilter.cli.spare_flag import add_spare_argument, check_spare_nodes
from kilter.cli.split_wait_flags import add_split_wait_arguments
from kilter.extenders.binder import ApiBinder, Binder
from kilter.extenders.explain import DecisionLog
from kilter.extenders.scheduler import SchedulerExtender
from kilter.extenders.server import App
from kilter.extenders.volcano import PodGroupEvents, VolcanoExtender
from kilter.gangs import GangBook, GangId, GangKey, KeySecret, PlanKeys, PlanRecorder, key_secret
from kilter.gangs.decisions import DecisionFeed
from kilter.gangs.expected_starts import RECENT_MAX_AGE_S
from kilter.gangs.waits import SplitWaits
from kilter.kube.api import ApiServer, connect
from kilter.kube.events import EventRecorder
from kilter.kube.follower import LeaseFollower
from kilter.kube.leader import LeaderElector
from kilter.lifecycle import LifecycleController
from kilter.lifecycle.requests import MaintenanceRequests, RequestSettings
from kilter.model.errors import InputError
from kilter.model.kueue import KUEUE_GROUP, ClusterQueue, Cohort, ResourceFlavor
from kilter.quota.tree import build_tree
from kilter.state.cluster import from_objects
from kilter.state.feed import SnapshotFeed, settle
from kilter.state.live import LiveFeed, default_resources
from kilter.state.snapshot import load_documents
from kilter.state.store import ClusterStore
from kilter.topology.lifecycle import LifecyclePolicy
from kilter.webhooks.admissioncheck import CONTROLLER_NAME, CheckDecision, Controller
from kilter.webhooks.mutate import Mutator
from kilter.webhooks.server import WebhookApp
from kilter.webhooks.tls import ReloadingTLS
from kilter.webhooks.validate import Validator

__all__ = ["ServeConfig", "add_parser", "build_app", "listeners", "run", "webhook_app"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The flags of ``kilter serve``; ``ServeConfig.from_args`` reads what they parse to, and their defaults are
    ``ServeConfig``'s."""
    p = sub.add_parser(
        "serve",
        help="run the kube-scheduler extender, Volcano's extender verbs, the admission webhooks and the gRPC API",
        description=(
            "HTTP listener (--http-port): /scheduler/{filter,prioritize,preempt,bind}, /volcano/<verb> (Volcano's "
            "extender plugin), /debug/explain, /debug/views, /debug/volcano, /metrics, "
            "/healthz, /readyz. HTTPS listener (--webhook-port, only with --tls-cert-file and --tls-key-file): "
            "/mutate, /validate, /healthz, /readyz; the certificate is re-read when its files change. gRPC listener "
            "(--grpc-port): kilter.v1.Placement, grpc.health.v1.Health, reflection."
        ),
        epilog=(
            "Certificates for the webhooks: in a cluster, let cert-manager issue one into a Secret mounted into "
            "kilter's pod (config/overlays/webhooks shows how; the apiserver's caBundle comes from cert-manager's "
            "CA injector). Locally: openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 "
            "-subj /CN=kilter -addext subjectAltName=IP:127.0.0.1 -keyout tls.key -out tls.crt"
        ),
    )
    d = DEFAULTS
    p.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="a config.kilter.dev/v1alpha1 Configuration (`kilter config default` prints one); the flags given "
        "override it, and it is re-read when it changes",
    )
    sources.add_source_arguments(p, live=False)
    p.add_argument("--http-port", type=int, default=d.http_port, help=f"extender listener port (default {d.http_port})")
    p.add_argument("--address", default=d.address, help="address to listen on (default all)")
    p.add_argument(
        "--webhook-port",
        type=int,
        default=d.webhook_port,
        help=f"admission webhook listener port (default {d.webhook_port})",
    )
    p.add_argument("--tls-cert-file", type=Path, help="certificate (PEM) of the webhook listener; starts it")
    p.add_argument("--tls-key-file", type=Path, help="the certificate's private key (PEM)")
    p.add_argument("--http-tls", action="store_true", help="serve the HTTP listener over HTTPS too, same certificate")
    p.add_argument(
        "--http-client-ca",
        type=Path,
        help="with --http-tls: require client certificates signed by this CA (PEM); their holders are trusted "
        "from any address",
    )
    p.add_argument(
        "--trusted-networks",
        metavar="CIDR[,CIDR...]",
        default=",".join(d.trusted_networks),
        help="callers that may use /scheduler/*, /volcano/* and /debug/*, by peer address; replaces the default "
        f"{','.join(d.trusted_networks)} (loopback: list it too to keep it). Others get 403; /healthz, /readyz "
        "and /metrics answer everyone",
    )
    p.add_argument(
        "--probe-networks",
        metavar="CIDR[,CIDR...]",
        default=",".join(d.probe_networks),
        help="addresses the kubelet probes from (the node's: the manifests pass the pod's hostIP); their "
        "connections may use the trusted callers' reserve of the HTTP listener's connections, so probes get "
        "through whatever untrusted peers hold. Not trusted with the verbs",
    )
    p.add_argument(
        "--kilter-user",
        action="append",
        default=[],
        help="user allowed to write kilter-only annotations (repeatable; default kilter's service account)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=d.max_body_bytes,
        help=f"largest /scheduler/* body accepted (default {d.max_body_bytes}: node names, as nodeCacheCapable "
        "sends them; full Node objects need ~50 KB a node)",
    )
    p.add_argument(
        "--volcano-max-body-bytes",
        type=int,
        default=d.volcano_max_body_bytes,
        help=f"largest /volcano/* body accepted (default {d.volcano_max_body_bytes}: onSessionOpen of ~11,000 nodes)",
    )
    p.add_argument(
        "--header-timeout",
        default=f"{d.header_timeout_s:g}s",
        help="close a connection that has not sent a request's headers within this (from its start, or a "
        "kept-alive request's first byte)",
    )
    p.add_argument(
        "--body-timeout",
        default=f"{d.body_timeout_s:g}s",
        help="close a connection whose request body is not complete this long after its headers",
    )
    p.add_argument(
        "--tls-handshake-timeout",
        default=f"{d.tls_handshake_timeout_s:g}s",
        help="close a TLS connection whose handshake takes longer",
    )
    p.add_argument(
        "--keep-alive-timeout",
        default=f"{d.keep_alive_timeout_s:g}s",
        help="close a kept-alive connection idle for this long between requests",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=d.max_connections,
        help=f"open connections per listener, gRPC's included, and open gRPC streams (default {d.max_connections}); "
        "more are closed at once, unanswered",
    )
    api = p.add_mutually_exclusive_group()
    api.add_argument(
        "--kubeconfig", type=Path, help="watch this cluster as the state (unless --snapshot) and bind pods through it"
    )
    api.add_argument(
        "--in-cluster", action="store_true", help="the same with the API server of the cluster kilter's pod runs in"
    )
    p.add_argument("--context", help="kubeconfig context (default: its current-context)")
    p.add_argument(
        "--leader-elect",
        action="store_true",
        help="with several replicas: only the holder of the Lease writes (AdmissionCheck status, plans, Events)",
    )
    p.add_argument("--lease", default=d.lease, help=f"the Lease of --leader-elect (default {d.lease})")
    p.add_argument(
        "--follow-lease",
        metavar="NAMESPACE/NAME",
        help="as a sidecar of several kube-scheduler replicas: write only while the scheduler in this pod holds "
        "its Lease (kube-system/kube-scheduler, or a second scheduler's leaderElection.resourceName)",
    )
    p.add_argument(
        "--queues",
        type=Path,
        help="ClusterQueue, Cohort and ResourceFlavor objects (YAML) for Volcano queues when Kueue is not installed",
    )
    p.add_argument(
        "--gang-timeout",
        default=f"{d.gang_timeout_s / 60:g}m",
        help="drop a gang's plan if not all pods bind within this",
    )
    p.add_argument("--plan-key-file", type=Path, help="keys signing kilter.dev/plan records, one per line (a Secret)")
    p.add_argument(
        "--plan-key-secret",
        metavar="NAMESPACE/NAME",
        help="a Secret holding the keys of kilter.dev/plan records (data.keys): created with a random key when "
        "absent, re-read every minute, rotated by the writing replica; needs a cluster, excludes --plan-key-file",
    )
    p.add_argument(
        "--plan-key-rotation",
        default=f"{d.plan_key_rotation_s / 86400:g}d",
        help="with --plan-key-secret: put a new key first once the first is this old, keeping the previous one",
    )
    p.add_argument(
        "--max-namespace-gang-gpus",
        type=int,
        default=d.max_namespace_gang_gpus,
        metavar="N",
        help="GPUs the open plans of one namespace's gangs no queue admitted yet may hold (default: no cap for "
        "gangs whose pods kilter's state holds; half the fleet's GPUs for pods it does not show yet, which count "
        "as one namespace)",
    )
    p.add_argument(
        "--max-namespace-gang-plans",
        type=int,
        default=d.max_namespace_gang_plans,
        metavar="N",
        help=f"open plans of one namespace's gangs no queue admitted yet (default {d.max_namespace_gang_plans})",
    )
    serve_grpc.add_grpc_arguments(p)
    add_split_wait_arguments(p, reservations=True)
    add_spare_argument(p, lend=True)
    p.add_argument(
        "--lifecycle",
        action="store_true",
        help="run the lifecycle controller: GPU nodes moved through kilter.dev/lifecycle states (ready, degraded, "
        "repairing, qualifying) by health over time and qualification results; its policy is the Configuration's "
        "lifecycle section (docs/lifecycle.md)",
    )
    p.add_argument(
        "--reload-interval",
        default=f"{d.reload_interval_s:g}s",
        help="how often to check the snapshot file for changes",
    )
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default=d.log_level)
    p.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=d.log_format,
        help="text, or json: one object per line with time, level, logger, message and the gang/pod/workload keys",
    )
    p.set_defaults(func=run, parser=p)


STARTS_REFRESH_S = RECENT_MAX_AGE_S / 2  # the doors' reservations are at most this old, plus one answer's work


def build_app(config: ServeConfig) -> tuple[App, ClusterStore]:
    """The app and its state, loaded and ready (also what the tests serve).

    A snapshot (``--snapshot``, ``--demo``) is minutes old, not a second like
    a list/watch feed, so the two bounds that wait for the feed are lifted
    there: an assumed booking lasts until a snapshot shows the pod (docs/serve.md
    promises so; only trusted callers, loopback by default, reach bind, so a
    forged bind is the operator's own), and a plan for a pod the state does
    not show yet lives as long as any plan (``ServeConfig.gang_limits``),
    else every new gang's plan would be dropped after 30 s. A live feed keeps
    both.
    """
    catalog = sources.catalog_of(config.platforms)
    check_spare_nodes(config.spare_nodes_per_domain, catalog)
    store = ClusterStore(
        catalog=catalog,
        assume_ttl_s=math.inf if config.is_snapshot else None,
        spare_nodes_default=config.spare_nodes_per_domain,
        spares_lent_default=config.spares_for_preemptible,
        health=sources.health_of(config.health_signals),
    )
    startup: list[Callable[[], Awaitable[None]]] = []
    stops: list[Callable[[], None]] = []
    api = _connect(config)
    live: LiveFeed | None = None
    if config.demo:
        store.replace(sources.demo_objects(catalog))
        store.fleet()
    elif config.snapshot is not None:
        feed = SnapshotFeed(config.snapshot, store, interval_s=config.reload_interval_s)
        feed.load()

        # The loop holds its tasks only weakly: an unreferenced watch could be collected mid-run, and
        # nothing would stop it at shutdown.
        watching: list[asyncio.Task[None]] = []

        async def start_watch() -> None:
            watching.append(asyncio.get_running_loop().create_task(feed.watch(), name="snapshot-watch"))

        def stop_watch() -> None:
            while watching:
                watching.pop().cancel()

        startup.append(start_watch)
        stops.append(stop_watch)
    elif api is not None:
        live = LiveFeed(api, store, default_resources(catalog))

        async def start_live() -> None:
            live.start(asyncio.get_running_loop())

        startup.append(start_live)
    else:
        raise InputError(
            "no cluster to serve: pass --kubeconfig FILE or --in-cluster, --snapshot FILE, "
            "or --demo for the embedded demo fleet"
        )
    elector = _elector(config, api)
    is_writer: Callable[[], bool] = (lambda: elector.is_leader) if elector is not None else (lambda: True)
    if elector is not None:

        async def campaign() -> None:
            elector.start()

        startup.append(campaign)
    keys, keys_from = _plan_keys(config, api, is_writer)
    if keys_from is not None:

        async def follow_keys() -> None:
            keys_from.start()

        startup.append(follow_keys)
    recorder = _plan_recorder(api, live)
    if recorder is not None:
        recorder.is_writer, recorder.keys = is_writer, keys
    queues = _queue_objects(config.queues)
    gangs = GangBook(
        store,
        settings=book_settings(config),
        on_planned=recorder.on_planned if recorder is not None else None,
        keys=keys,
        waits=SplitWaits(store, queues=queues, runtime_window=config.runtime_window),
    )
    start_keeping, stop_keeping = gangs.starts.background(STARTS_REFRESH_S)
    startup.append(start_keeping)
    stops.append(stop_keeping)
    log = DecisionLog(
        records=config.explain_records,
        per_pod=config.explain_per_pod,
        entries=config.explain_nodes,
        feed=DecisionFeed(),
    )
    extender = SchedulerExtender(store, gangs, log)
    binder = ApiBinder(api) if api is not None else Binder()
    events = PodGroupEvents(api, is_writer=is_writer) if api is not None else None
    volcano = VolcanoExtender(store, extender.gangs, queues=queues, events=events)
    volcano.notes.feed = extender.log.feed
    app = App(
        store,
        extender,
        binder,
        max_body_bytes=config.max_body_bytes,
        volcano_max_body_bytes=config.volcano_max_body_bytes,
        startup=startup,
        volcano=volcano,
        sync_status=live.status if live is not None else None,
        # Writers stop before the Lease is released, so the next leader never overlaps with this one.
        trusted=config.trust_rule,
        views=ServedViews(store, extender.log.explain, gangs.starts).answer,
        shutdown=[
            *stops,
            *([recorder.close] if recorder is not None else []),
            *([keys_from.stop] if keys_from is not None else []),
            *([elector.stop] if elector is not None else []),
            *([live.stop] if live is not None else []),
        ],
    )
    app.is_writer = is_writer
    if api is not None and api.credentials is not None:
        app.problem_sources.append(api.credentials.problems)
        app.metrics.registry.register(CredentialsReading(api.credentials))
    if keys_from is not None:
        app.metrics.registry.register(key_secret.KeySecretReading(keys_from))
    if live is not None:
        app.metrics.registry.register(readings.StateReading(live))
    lease = config.follow_lease or (config.lease if config.leader_elect else "")
    app.metrics.registry.register(readings.LeaderReading(is_writer, lease))
    return app, store


def _plan_keys(
    config: ServeConfig, api: ApiServer | None, is_writer: Callable[[], bool]
) -> tuple[PlanKeys, KeySecret | None]:
    """The keys signing plan records: a Secret's (read or created now, then followed), a file's, or this process's.

    InputError for a Secret that is malformed or cannot be read (RBAC), so that ``kilter serve`` exits 2 rather
    than sign with a key no other replica holds.
    """
    if config.plan_key_secret is None and config.plan_key_file is None:
        # Said only where records are written: without a cluster (a snapshot, the demo) none is.
        return PlanKeys.ephemeral(announce=api is not None), None
    if config.plan_key_secret is None:
        return PlanKeys.load(config.plan_key_file), None
    if api is None:
        raise InputError("--plan-key-secret needs a cluster: --kubeconfig FILE or --in-cluster")
    namespace, name = key_secret.parse_ref(config.plan_key_secret)
    secret = KeySecret(api, namespace, name, is_writer=is_writer, rotation_s=config.plan_key_rotation_s)
    return secret.load(), secret


def _elector(config: ServeConfig, api: ApiServer | None) -> LeaderElector | LeaseFollower | None:
    """Who decides whether this replica writes: a candidate for kilter's Lease, a follower of kube-scheduler's, or
    none (every replica writes)."""
    follow, elect = config.follow_lease, config.leader_elect  # ServeConfig checked both, and the Lease's form
    if not follow and not elect:
        return None
    if api is None:
        raise InputError(
            f"{'--follow-lease' if follow else '--leader-elect'} needs a cluster: --kubeconfig FILE or --in-cluster"
        )
    namespace, _, name = str(follow or config.lease).partition("/")
    if follow:
        return LeaseFollower(api, namespace, name, socket.gethostname())
    identity = f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    return LeaderElector(api, namespace, name, identity)


def _plan_recorder(api: ApiServer | None, live: LiveFeed | None) -> PlanRecorder | None:
    """With a cluster connected, gang plans are recorded on it (issue #7) so a restart keeps them; else None.

    Leader election is to pass ``is_writer`` (or set ``recorder.is_writer``): until then every replica writes.
    """
    if api is None:
        return None
    kueue_version = (lambda: live.served_version(KUEUE_GROUP, "Workload")) if live is not None else None
    recorder = PlanRecorder(api, kueue_version=kueue_version)
    recorder.events = EventRecorder(api, is_writer=lambda: recorder.is_writer())
    return recorder


def _connect(config: ServeConfig) -> ApiServer | None:
    """The connected cluster's API server, its kubeconfig read once; None without ``kubeconfig``/``in_cluster``.

    One ``ApiServer`` serves the feed, the binder, the elector, the plan recorder and the Events: each call has a
    connection of its own, so sharing it across threads is safe.
    """
    if not config.has_cluster:
        return None
    return connect(config.kubeconfig, context=config.context)


def _queue_objects(path: Path | None) -> list[ClusterQueue | Cohort | ResourceFlavor]:
    """The quota definitions of ``--queues``: ClusterQueues, Cohorts and ResourceFlavors, checked now."""
    if path is None:
        return []
    state = from_objects(load_documents(path))
    found: list[ClusterQueue | Cohort | ResourceFlavor] = [*state.cluster_queues, *state.cohorts, *state.flavors]
    if not found:
        raise InputError(f"--queues {path}: no ClusterQueue, Cohort or ResourceFlavor in it")
    problems = build_tree(state.cluster_queues, state.cohorts).problems
    if problems:
        raise InputError(f"--queues {path}: {problems[0]}")
    return found


def tls_files(config: ServeConfig) -> ReloadingTLS | None:
    cert, key = config.tls_cert_file, config.tls_key_file  # ServeConfig holds both or neither
    return ReloadingTLS(cert, key) if cert is not None and key is not None else None


def webhook_app(store: ClusterStore, users: Sequence[str]) -> WebhookApp:
    validator = Validator(store, kilter_users=tuple(users or [DEFAULT_KILTER_USER]))
    return WebhookApp(store, Mutator(store, validator), validator)


def listeners(
    config: ServeConfig, app: App, store: ClusterStore, tls: ReloadingTLS | None
) -> tuple[list[uvicorn.Server], list[Guard]]:
    """The HTTP listener and, with a certificate, the webhook listener, each under its own ``Guard`` (its own
    connection cap, so that a flood of one cannot take the other's connections); both counted in /metrics."""
    log = logging.getLogger("kilter.serve")
    limits = config.listener_limits
    http_tls = tls
    if tls is not None and config.http_client_ca is not None:
        http_tls = ReloadingTLS(tls.files.cert, tls.files.key, client_ca=config.http_client_ca)
    http_context = http_tls.context if http_tls is not None and config.http_tls else None
    http = Guard("http", limits, http_context, trust=config.connection_rule)
    servers = [uvicorn.Server(_listener(app, http, config, config.http_port, "on"))]
    guards = [http]
    if tls is not None:
        hooks = webhook_app(store, config.kilter_user)
        store.idle_fleet()  # built now, not by the first review
        webhooks = Guard("webhooks", limits, tls.context)
        servers.append(uvicorn.Server(_listener(hooks, webhooks, config, config.webhook_port, "off")))
        guards.append(webhooks)
        log.info("admission webhooks on https://%s:%d (/mutate, /validate)", config.address, config.webhook_port)
    else:
        log.info("admission webhooks not started: no --tls-cert-file/--tls-key-file (see kilter serve --help)")
    app.metrics.registry.register(ListenerReading(guards))
    return servers, guards


def _listener(app: Any, guard: Guard, config: ServeConfig, port: int, lifespan: Literal["on", "off"]) -> uvicorn.Config:
    return listener_config(app, guard, host=config.address, port=port, lifespan=lifespan, log_level=config.log_level)


async def _serve_all(servers: list[uvicorn.Server], controller: Controller | None) -> None:
    """Run every listener (and the controller); when one listener stops, stop all (``serve_grpc.serve_all``)."""
    await serve_grpc.serve_all(servers, controller)


def run(args: argparse.Namespace) -> int:
    given = configuration.explicit_flags(args.parser, args.argv)
    config = configuration.merged(args, given)
    logs.configure(config.log_level, config.log_format)
    log = logging.getLogger("kilter.serve")
    tls = tls_files(config)
    check_free(listened(config, webhooks=tls is not None))
    app, store = build_app(config)
    if args.config is not None:
        reloader = ConfigReloader(args.config, configuration.given_fields(args, given), config, app)
        app.startup.append(reloader.start)
        app.shutdown.append(reloader.stop)
    settle()
    for warning in store.fleet().warnings:
        logging.getLogger("kilter.state").warning("%s", warning)
    servers, guards = listeners(config, app, store, tls)
    if config.tls_cert_file is not None:
        app.metrics.registry.register(readings.CertificateReading(config.tls_cert_file))
    ensure_file_limit(config.max_connections * (len(guards) + (1 if config.grpc_port else 0)))
    controller = None
    if isinstance(app.binder, ApiBinder):
        gangs = app.extender.gangs

        def adopt(decision: CheckDecision) -> None:
            if decision.plan is not None:
                key = GangKey(decision.namespace, "workload", (decision.workload,)).format()
                gangs.adopt(GangId(key, CONTROLLER_NAME, len(decision.plan.node_indices)), decision.plan)

        recorder = EventRecorder(app.binder.api, is_writer=app.is_writer)
        controller = Controller(
            store,
            app.binder.api,
            on_ready=adopt,
            is_writer=app.is_writer,
            events=recorder,
            keys=gangs.keys,
            waits=gangs.waits,
            kept=gangs.kept,
            feed=app.extender.log.feed,
        )
        app.metrics.registry.register(readings.AdmissionCheckReading(controller))
        log.info("AdmissionCheck controller %s running", CONTROLLER_NAME)
    services, loops = [], []
    if config.lifecycle and isinstance(app.binder, ApiBinder):
        policy = LifecyclePolicy(
            config.lifecycle_failures, config.lifecycle_window_s, config.lifecycle_sustained_s, config.lifecycle_suite
        )
        recorder = EventRecorder(app.binder.api, is_writer=app.is_writer)
        requests = MaintenanceRequests(
            store,
            app.binder.api,
            RequestSettings(
                config.maintenance_max_unavailable,
                config.maintenance_step_s,
                config.maintenance_max_wait_s,
                config.maintenance_eviction_timeout_s,
                config.lifecycle_suite,
            ),
            events=recorder,
        )
        mover = LifecycleController(
            store,
            app.binder.api,
            policy=policy,
            events=recorder,
            interval_s=config.lifecycle_interval_s,
            is_writer=app.is_writer,
            requests=requests,
        )
        loops.append(mover.run)
        app.metrics.registry.register(readings.LifecycleReading(mover))
        log.info("lifecycle controller running")
    if config.pool is not None:
        api = app.binder.api if isinstance(app.binder, ApiBinder) else None
        parts = serve_pool.pool_parts(config, config.pool, store, api, app.is_writer)
        services.append(parts.service)
        loops.append(parts.gossip.run)
        if parts.dispatcher is not None:
            loops.append(parts.dispatcher.run)
        app.metrics.registry.register(serve_pool.PoolReading(parts))
        log.info("pool region %s with %d peers", config.pool.region, len(config.pool.peers))
    placement = serve_grpc.placement_server(config, app, store, services=services)
    uvloop.run(serve_grpc.serve_all(servers, controller, placement, loops))
    return 0

"""``kilter serve``: the scheduler extender, Volcano's extender verbs and the webhooks over one state.

State comes from ``--snapshot FILE`` (watched and reloaded when it changes)
or ``--demo``. With ``--kubeconfig``/``--in-cluster`` the bind verb creates
the Binding through that cluster's API server and Volcano refusals become
Events; without one, a binding is recorded in the state only. (List/watch of
the connected cluster as the state feed comes with the live-cluster feeder.)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import uvicorn
import uvloop

from kilter.cli import sources
from kilter.extenders.events import PodGroupEvents
from kilter.extenders.explain import DecisionLog
from kilter.extenders.scheduler import ApiBinder, Binder, SchedulerExtender
from kilter.extenders.server import DEFAULT_MAX_BODY_BYTES, App
from kilter.extenders.volcano import VolcanoExtender
from kilter.gangs import GangBook, GangId, GangKey, PlanRecorder
from kilter.kube.api import ApiServer, connect
from kilter.kube.events import EventRecorder
from kilter.kube.follower import LeaseFollower
from kilter.kube.leader import LeaderElector
from kilter.model.errors import InputError
from kilter.model.kueue import KUEUE_GROUP, ClusterQueue, Cohort, ResourceFlavor
from kilter.quota.policy import parse_duration
from kilter.quota.tree import build_tree
from kilter.state.cluster import from_objects
from kilter.state.feed import SnapshotFeed, settle
from kilter.state.live import LiveFeed, default_resources
from kilter.state.snapshot import load_documents
from kilter.state.store import ClusterStore
from kilter.webhooks.admissioncheck import CONTROLLER_NAME, CheckDecision, Controller
from kilter.webhooks.mutate import Mutator
from kilter.webhooks.server import WebhookApp
from kilter.webhooks.tls import ReloadingTLS
from kilter.webhooks.validate import Validator

__all__ = ["add_parser", "build_app", "run", "webhook_app"]

DEFAULT_LEASE = "kube-system/kilter"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="run the kube-scheduler extender, Volcano's extender verbs and the admission webhooks",
        description=(
            "HTTP listener (--http-port): /scheduler/{filter,prioritize,preempt,bind}, /volcano/<verb> (Volcano's "
            "extender plugin), /debug/explain, /debug/volcano, /metrics, "
            "/healthz, /readyz. HTTPS listener (--webhook-port, only with --tls-cert-file and --tls-key-file): "
            "/mutate, /validate, /healthz, /readyz; the certificate is re-read when its files change."
        ),
        epilog=(
            "Certificates for the webhooks: in a cluster, let cert-manager issue one into a Secret mounted into "
            "kilter's pod (manifests/webhooks/ shows how; the apiserver's caBundle comes from cert-manager's CA "
            "injector). Locally: openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 "
            "-subj /CN=kilter -addext subjectAltName=IP:127.0.0.1 -keyout tls.key -out tls.crt"
        ),
    )
    sources.add_source_arguments(p, live=False)
    p.add_argument("--http-port", type=int, default=8888, help="extender listener port (default 8888)")
    p.add_argument("--address", default="0.0.0.0", help="address to listen on (default all)")
    p.add_argument("--webhook-port", type=int, default=9443, help="admission webhook listener port (default 9443)")
    p.add_argument("--tls-cert-file", type=Path, help="certificate (PEM) of the webhook listener; starts it")
    p.add_argument("--tls-key-file", type=Path, help="the certificate's private key (PEM)")
    p.add_argument("--http-tls", action="store_true", help="serve the HTTP listener over HTTPS too, same certificate")
    p.add_argument(
        "--kilter-user",
        action="append",
        default=[],
        help="user allowed to write kilter-only annotations (repeatable; default kilter's service account)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        help=f"largest request body accepted (default {DEFAULT_MAX_BODY_BYTES}: full Nodes of 5,000 nodes)",
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
    p.add_argument("--lease", default=DEFAULT_LEASE, help=f"the Lease of --leader-elect (default {DEFAULT_LEASE})")
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
    p.add_argument("--gang-timeout", default="5m", help="drop a gang's plan if not all pods bind within this")
    p.add_argument("--reload-interval", default="1s", help="how often to check the snapshot file for changes")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    p.set_defaults(func=run)


def build_app(args: argparse.Namespace) -> tuple[App, ClusterStore]:
    """The app and its state, loaded and ready (also what the tests serve)."""
    catalog = sources.load_catalog(args)
    store = ClusterStore(catalog=catalog)
    startup: list[Callable[[], Awaitable[None]]] = []
    live: LiveFeed | None = None
    if getattr(args, "demo", False):
        store.replace(sources.demo_objects(catalog))
        store.fleet()
    elif args.snapshot is not None:
        feed = SnapshotFeed(
            args.snapshot, store, interval_s=parse_duration(args.reload_interval, path="--reload-interval")
        )
        feed.load()

        async def start_watch() -> None:
            asyncio.get_running_loop().create_task(feed.watch())

        startup.append(start_watch)
    elif getattr(args, "kubeconfig", None) is not None or getattr(args, "in_cluster", False):
        live = LiveFeed(_connect(args), store, default_resources(catalog))

        async def start_live() -> None:
            live.start(asyncio.get_running_loop())

        startup.append(start_live)
    else:
        raise InputError(
            "no cluster to serve: pass --kubeconfig FILE or --in-cluster, --snapshot FILE, "
            "or --demo for the embedded demo fleet"
        )
    timeout = parse_duration(args.gang_timeout, path="--gang-timeout")
    elector = _elector(args)
    is_writer: Callable[[], bool] = (lambda: elector.is_leader) if elector is not None else (lambda: True)
    if elector is not None:

        async def campaign() -> None:
            elector.start()

        startup.append(campaign)
    recorder = _plan_recorder(args, live)
    if recorder is not None:
        recorder.is_writer = is_writer
    gangs = GangBook(store, timeout_s=timeout, on_planned=recorder.on_planned if recorder is not None else None)
    extender = SchedulerExtender(store, gangs, DecisionLog())
    if args.max_body_bytes < 1024:
        raise InputError("--max-body-bytes must be at least 1024")
    binder = Binder()
    if getattr(args, "kubeconfig", None) is not None or getattr(args, "in_cluster", False):
        binder = ApiBinder(_connect(args))
    events = PodGroupEvents(binder.api, is_writer=is_writer) if isinstance(binder, ApiBinder) else None
    volcano = VolcanoExtender(
        store, extender.gangs, queues=_queue_objects(getattr(args, "queues", None)), events=events
    )
    app = App(
        store,
        extender,
        binder,
        max_body_bytes=args.max_body_bytes,
        startup=startup,
        volcano=volcano,
        sync_status=live.status if live is not None else None,
        # Writers stop before the Lease is released, so the next leader never overlaps with this one.
        shutdown=[
            *([recorder.close] if recorder is not None else []),
            *([elector.stop] if elector is not None else []),
            *([live.stop] if live is not None else []),
        ],
    )
    app.is_writer = is_writer
    return app, store


def _elector(args: argparse.Namespace) -> LeaderElector | LeaseFollower | None:
    """Who decides whether this replica writes: a candidate for kilter's Lease, a follower of kube-scheduler's, or
    none (every replica writes)."""
    follow = getattr(args, "follow_lease", None)
    elect = getattr(args, "leader_elect", False)
    if not follow and not elect:
        return None
    flag = "--follow-lease" if follow else "--leader-elect"
    if follow and elect:
        raise InputError("--leader-elect and --follow-lease exclude each other: kilter either campaigns or follows")
    if getattr(args, "kubeconfig", None) is None and not getattr(args, "in_cluster", False):
        raise InputError(f"{flag} needs a cluster: --kubeconfig FILE or --in-cluster")
    lease = str(follow or getattr(args, "lease", DEFAULT_LEASE))
    namespace, _, name = lease.partition("/")
    if not namespace or not name or "/" in name:
        raise InputError(f"{'--follow-lease' if follow else '--lease'} must be NAMESPACE/NAME, got {lease!r}")
    if follow:
        return LeaseFollower(_connect(args), namespace, name, socket.gethostname())
    identity = f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    return LeaderElector(_connect(args), namespace, name, identity)


def _plan_recorder(args: argparse.Namespace, live: LiveFeed | None) -> PlanRecorder | None:
    """With a cluster connected, gang plans are recorded on it (issue #7) so a restart keeps them; else None.

    Leader election is to pass ``is_writer`` (or set ``recorder.is_writer``): until then every replica writes.
    """
    if getattr(args, "kubeconfig", None) is None and not getattr(args, "in_cluster", False):
        return None
    kueue_version = (lambda: live.served_version(KUEUE_GROUP, "Workload")) if live is not None else None
    return PlanRecorder(_connect(args), kueue_version=kueue_version)


def _connect(args: argparse.Namespace) -> ApiServer:
    return connect(getattr(args, "kubeconfig", None), context=getattr(args, "context", None))


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


DEFAULT_KILTER_USER = "system:serviceaccount:kube-system:kilter-scheduler"


def tls_files(args: argparse.Namespace) -> ReloadingTLS | None:
    cert, key = args.tls_cert_file, args.tls_key_file
    if cert is None and key is None:
        if args.http_tls:
            raise InputError("--http-tls needs --tls-cert-file and --tls-key-file")
        return None
    if cert is None or key is None:
        raise InputError("--tls-cert-file and --tls-key-file go together")
    return ReloadingTLS(cert, key)


def webhook_app(store: ClusterStore, users: list[str]) -> WebhookApp:
    validator = Validator(store, kilter_users=tuple(users or [DEFAULT_KILTER_USER]))
    return WebhookApp(store, Mutator(store, validator), validator)


def _config(
    app: Any, host: str, port: int, lifespan: Literal["on", "off"], level: str, tls: ReloadingTLS | None
) -> uvicorn.Config:
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http="httptools",
        lifespan=lifespan,
        access_log=False,
        log_level=level,
    )
    config.load()
    if tls is not None:
        config.ssl = tls.context
    return config


async def _serve_all(servers: list[uvicorn.Server], controller: Controller | None) -> None:
    """Run every listener (and the controller); when one listener stops (a signal, a failed bind), stop all."""
    tasks = [asyncio.create_task(s.serve()) for s in servers]
    background = asyncio.create_task(controller.run()) if controller is not None else None
    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for s in servers:
        s.should_exit = True
    await asyncio.gather(*tasks, return_exceptions=True)
    if background is not None:
        background.cancel()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("kilter.serve")
    tls = tls_files(args)
    app, store = build_app(args)
    settle()
    for warning in store.fleet().warnings:
        logging.getLogger("kilter.state").warning("%s", warning)
    servers = [
        uvicorn.Server(_config(app, args.address, args.http_port, "on", args.log_level, tls if args.http_tls else None))
    ]
    if tls is not None:
        hooks = webhook_app(store, args.kilter_user)
        store.idle_fleet()  # built now, not by the first review
        servers.append(uvicorn.Server(_config(hooks, args.address, args.webhook_port, "off", args.log_level, tls)))
        log.info("admission webhooks on https://%s:%d (/mutate, /validate)", args.address, args.webhook_port)
    else:
        log.info("admission webhooks not started: no --tls-cert-file/--tls-key-file (see kilter serve --help)")
    controller = None
    if isinstance(app.binder, ApiBinder):
        gangs = app.extender.gangs

        def adopt(decision: CheckDecision) -> None:
            if decision.plan is not None:
                key = GangKey(decision.namespace, "workload", (decision.workload,)).format()
                gangs.adopt(GangId(key, CONTROLLER_NAME, len(decision.plan.node_indices)), decision.plan)

        recorder = EventRecorder(app.binder.api, is_writer=app.is_writer)
        controller = Controller(store, app.binder.api, on_ready=adopt, is_writer=app.is_writer, events=recorder)
        log.info("AdmissionCheck controller %s running", CONTROLLER_NAME)
    uvloop.run(_serve_all(servers, controller))
    return 0

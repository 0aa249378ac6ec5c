"""``kilter serve``: the scheduler extender (and later the other listeners) over a snapshot or the demo fleet.

State comes from ``--snapshot FILE`` (watched and reloaded when it changes)
or ``--demo``. With ``--kubeconfig``/``--in-cluster`` the bind verb creates
the Binding through that cluster's API server; without one, a binding is
recorded in the state only. (List/watch of the connected cluster as the
state feed comes with the live-cluster feeder.)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import uvicorn

from kilter.cli import sources
from kilter.extenders.explain import DecisionLog
from kilter.extenders.gangs import GangBook
from kilter.extenders.scheduler import ApiBinder, Binder, SchedulerExtender
from kilter.extenders.server import DEFAULT_MAX_BODY_BYTES, App
from kilter.model.errors import InputError
from kilter.quota.policy import parse_duration
from kilter.state.api import connect
from kilter.state.feed import SnapshotFeed, settle
from kilter.state.store import ClusterStore

__all__ = ["add_parser", "build_app", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="run the kube-scheduler extender over a snapshot or the demo fleet",
        description="Serve /scheduler/{filter,prioritize,preempt,bind}, /debug/explain, /metrics, /healthz, /readyz.",
    )
    sources.add_source_arguments(p)
    p.add_argument("--http-port", type=int, default=8888, help="extender listener port (default 8888)")
    p.add_argument("--address", default="0.0.0.0", help="address to listen on (default all)")
    p.add_argument("--tls-cert-file", type=Path, help="serve the extender over HTTPS with this certificate")
    p.add_argument("--tls-key-file", type=Path, help="the certificate's private key")
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        help=f"largest request body accepted (default {DEFAULT_MAX_BODY_BYTES}: full Nodes of 5,000 nodes)",
    )
    api = p.add_mutually_exclusive_group()
    api.add_argument("--kubeconfig", type=Path, help="bind pods through this cluster's API server")
    api.add_argument("--in-cluster", action="store_true", help="bind pods through the API server of this pod's cluster")
    p.add_argument("--context", help="kubeconfig context (default: its current-context)")
    p.add_argument("--gang-timeout", default="5m", help="drop a gang's plan if not all pods bind within this")
    p.add_argument("--reload-interval", default="1s", help="how often to check the snapshot file for changes")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    p.set_defaults(func=run)


def build_app(args: argparse.Namespace) -> tuple[App, ClusterStore]:
    """The app and its state, loaded and ready (also what the tests serve)."""
    catalog = sources.load_catalog(args)
    store = ClusterStore(catalog=catalog)
    startup: list[Callable[[], Awaitable[None]]] = []
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
    else:
        raise InputError("no cluster to serve: pass --snapshot FILE (or --demo for the embedded demo fleet)")
    timeout = parse_duration(args.gang_timeout, path="--gang-timeout")
    extender = SchedulerExtender(store, GangBook(store, timeout_s=timeout), DecisionLog())
    if args.max_body_bytes < 1024:
        raise InputError("--max-body-bytes must be at least 1024")
    binder = Binder()
    if getattr(args, "kubeconfig", None) is not None or getattr(args, "in_cluster", False):
        binder = ApiBinder(connect(getattr(args, "kubeconfig", None), context=getattr(args, "context", None)))
    app = App(store, extender, binder, max_body_bytes=args.max_body_bytes, startup=startup)
    return app, store


def tls_context(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise InputError("--tls-cert-file and --tls-key-file go together")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise InputError(f"cannot load the TLS certificate: {exc}") from None
    return context


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    tls = tls_context(args.tls_cert_file, args.tls_key_file)
    app, store = build_app(args)
    settle()
    for warning in store.fleet().warnings:
        logging.getLogger("kilter.state").warning("%s", warning)
    config = uvicorn.Config(
        app,
        host=args.address,
        port=args.http_port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_level=args.log_level,
        ssl_certfile=str(args.tls_cert_file) if tls else None,
        ssl_keyfile=str(args.tls_key_file) if tls else None,
    )
    uvicorn.Server(config).run()
    return 0

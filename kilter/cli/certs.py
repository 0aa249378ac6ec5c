"""``kilter certs``: the webhooks' certificate and ``caBundle`` without cert-manager, rotated before expiry.

The ``self-signed`` overlay runs it as the Deployment ``kilter-certs`` (two
replicas, one leading by the Lease ``--lease``): every ``--interval`` the
leader makes sure the Secret ``--secret`` holds a serving pair for the
Service ``--service`` signed by kilter's own CA, renewed 30 days before it
expires, and that each ``--webhook-configuration`` trusts that CA
(``kilter.webhooks.cert_controller``). kilter's pod mounts the Secret and
re-reads the files when the kubelet swaps them in. ``--once`` runs one round
without a Lease and exits (non-zero when the round could not finish): for a
first install by hand, or a Job.

A small HTTP listener (``--http-port``) answers the kubelet's probes
(``/healthz``, ``/readyz``, which names credentials the API server refuses)
and Prometheus (``/metrics``: the certificate's expiry, rounds, failures,
leadership, refused credentials); it serves nothing else.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import signal
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from kilter.cli import logs
from kilter.cli.credential_reading import CredentialsReading
from kilter.gangs.key_secret import parse_ref
from kilter.kube.api import CERTS_AGENT, check_name, connect
from kilter.kube.leader import LeaderElector
from kilter.model.durations import parse_duration
from kilter.model.errors import InputError
from kilter.webhooks.cert_controller import WEBHOOK_APIS, CertController

__all__ = ["add_parser", "run"]

log = logging.getLogger("kilter.certs")

DEFAULT_CONFIGURATIONS = (
    "mutating/kilter-mutating-webhook-configuration",
    "validating/kilter-validating-webhook-configuration",
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "certs",
        help="keep the webhooks' certificate (a Secret) and the webhook configurations' caBundle, without cert-manager",
    )
    p.add_argument("--secret", default="kube-system/kilter-webhooks-tls", metavar="NAMESPACE/NAME")
    p.add_argument("--service", default="kube-system/kilter-webhooks", metavar="NAMESPACE/NAME")
    p.add_argument(
        "--webhook-configuration",
        action="append",
        default=[],
        metavar="KIND/NAME",
        help="mutating/NAME or validating/NAME whose caBundle to keep (repeatable; default kilter's two)",
    )
    p.add_argument("--lease", default="kube-system/kilter-certs", metavar="NAMESPACE/NAME")
    api = p.add_mutually_exclusive_group()
    api.add_argument("--kubeconfig", type=Path)
    api.add_argument("--in-cluster", action="store_true")
    p.add_argument("--context")
    p.add_argument("--interval", default="1m", help="how often the leader checks (default 1m)")
    p.add_argument("--once", action="store_true", help="one round, no Lease, then exit")
    p.add_argument("--http-port", type=int, default=8080, help="/healthz, /readyz, /metrics (default 8080; 0: off)")
    p.add_argument("--address", default="0.0.0.0")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    p.add_argument("--log-format", choices=("text", "json"), default="text")
    p.set_defaults(func=run)


def _configurations(refs: list[str]) -> list[str]:
    out = []
    for ref in refs or DEFAULT_CONFIGURATIONS:
        kind, _, name = ref.partition("/")
        if kind not in WEBHOOK_APIS or not name:
            raise InputError(f"--webhook-configuration must be mutating/NAME or validating/NAME, got {ref[:100]!r}")
        out.append(f"{kind}/{check_name(name, what='--webhook-configuration')}")
    return out


class _Reading(Collector):
    def __init__(self, controller: CertController, elector: LeaderElector | None) -> None:
        self.controller = controller
        self.elector = elector

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        secret = f"{self.controller.namespace}/{self.controller.name}"
        expiry = GaugeMetricFamily(
            "kilter_certificate_expiry_timestamp_seconds",
            "When the webhooks' serving certificate expires (Unix seconds), as last read or written",
            labels=["secret"],
        )
        if self.controller.expiry is not None:
            expiry.add_metric([secret], self.controller.expiry.timestamp())
        yield expiry
        yield CounterMetricFamily("kilter_certs_rounds", "Rounds run by the leader", value=self.controller.rounds)
        yield CounterMetricFamily(
            "kilter_certs_failures",
            "Rounds that could not read or write what they had to",
            value=self.controller.failures,
        )
        leader = GaugeMetricFamily("kilter_leader", "1 while this replica holds its Lease", labels=["lease"])
        if self.elector is not None:
            leader.add_metric([f"{self.elector.namespace}/{self.elector.name}"], 1.0 if self.elector.is_leader else 0.0)
        yield leader


def _listener(
    address: str, port: int, registry: CollectorRegistry, problems: Callable[[], list[str]]
) -> ThreadingHTTPServer:
    """The probe listener; ``/readyz`` answers 200 with "ok" and then ``problems()``, one a line (the credentials
    the API server refuses): a replica is no less ready for them, the lines are for whoever looks."""

    class Handler(BaseHTTPRequestHandler):
        timeout = 5  # seconds a client has to send its request: a stalled one does not hold a thread

        def log_message(self, format: str, *args: object) -> None:
            return None

        def do_GET(self) -> None:
            if self.path == "/healthz":
                body, kind = b"ok", "text/plain; charset=utf-8"
            elif self.path == "/readyz":
                body, kind = "\n".join(["ok", *problems()]).encode(), "text/plain; charset=utf-8"
            elif self.path == "/metrics":
                body, kind = generate_latest(registry), "text/plain; version=0.0.4; charset=utf-8"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def refuse(self) -> None:
            """405 for a method the probe listener knows but does not serve (501 stays for one it does not know)."""
            self.send_error(405)

        do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = refuse

    server = ThreadingHTTPServer((address, port), Handler)
    server.daemon_threads = True
    return server


def run(args: argparse.Namespace) -> int:
    logs.configure(args.log_level, args.log_format)
    secret, service = parse_ref(args.secret, "--secret"), parse_ref(args.service, "--service")
    lease = parse_ref(args.lease, "--lease")
    configurations = _configurations(args.webhook_configuration)
    interval_s = parse_duration(args.interval, path="--interval")
    if not 1 <= interval_s <= 86400:
        raise InputError("--interval must be from 1s to 1d: a renewal is due 30 days ahead, checked at each round")
    if args.kubeconfig is None and not args.in_cluster:
        raise InputError("kilter certs needs a cluster: --in-cluster or --kubeconfig FILE")
    api = connect(args.kubeconfig, context=args.context, user_agent=CERTS_AGENT)
    controller = CertController(api, secret, service, configurations)
    if args.once:
        done = controller.run_once()
        for line in done.errors:
            log.error("%s", line)
        for ref in done.missing:
            log.warning("%s does not exist (yet): its caBundle is set once it does", ref)
        return 1 if done.errors else 0
    identity = f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    elector = LeaderElector(api, *lease, identity)
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_Reading(controller, elector))
    credentials = api.credentials  # connect sets them
    if credentials is not None:
        registry.register(CredentialsReading(credentials))
    problems = credentials.problems if credentials is not None else list
    server = _listener(args.address, args.http_port, registry, problems) if args.http_port else None
    if server is not None:
        threading.Thread(target=server.serve_forever, name="certs-http", daemon=True).start()
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    elector.start()
    try:
        while not stopping.is_set():
            if elector.is_leader:
                done = controller.run_once()
                for line in done.errors:
                    log.warning("%s", line)
            stopping.wait(min(interval_s, elector.retry_period_s) if not elector.is_leader else interval_s)
    finally:
        elector.stop(release=True)
        if server is not None:
            server.shutdown()
    log.info("stopped at %s", dt.datetime.now(dt.UTC).isoformat())
    return 0

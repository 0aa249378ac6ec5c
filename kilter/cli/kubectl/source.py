"""kubectl's conventions for every view, and where its cluster state comes from.

Options every view takes, spelled as kubectl spells them: ``--kubeconfig``,
``--context``, ``-n/--namespace``, ``-A/--all-namespaces``, ``-o
table|wide|json|yaml``, ``--no-headers``; plus ``--snapshot FILE`` instead of
a cluster. The cluster is found as kubectl finds it: ``--kubeconfig``, else
``$KUBECONFIG`` (a list of files, merged), else ``~/.kube/config``, else the
pod's service account when running in a cluster. The namespace is ``-n``,
else the context's namespace, else ``default``.

The state is read once into a ``ClusterStore`` (the servers' own store), so
the views ask exactly the code the servers ask: the fleet is built once,
with every bound pod booked.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kilter.cli import sources
from kilter.cli.kubectl.decisions import Recorded
from kilter.cli.spare_flag import add_spare_argument, read_spare_nodes
from kilter.gangs.expected_starts import ExpectedStarts, expected_starts
from kilter.gangs.store_starts import StartsOfStore
from kilter.kube.api import PLUGIN_AGENT, ApiServer, check_namespace, connect
from kilter.model.errors import InputError
from kilter.quota.runtimes import WINDOW
from kilter.state import snapshot_file
from kilter.state.cluster import KNOWN_KINDS, NODES_AND_PODS
from kilter.state.live import default_resources, list_cluster
from kilter.state.snapshot_file import no_collection
from kilter.state.store import ClusterStore

__all__ = [
    "FORMATS",
    "SERVICE_ENV",
    "Cluster",
    "common_options",
    "connect_to",
    "kilter_service",
    "load",
    "namespace_of",
    "resolve_kubeconfig",
]

FORMATS = ("table", "wide", "json", "yaml")
SERVICE_ENV = "KUBECTL_KILTER_SERVICE"


def common_options() -> argparse.ArgumentParser:
    """The parent parser of every view: kubectl's flags, and ``--snapshot`` in place of a cluster."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("cluster (kubectl conventions)")
    g.add_argument("--kubeconfig", type=Path, help="path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    g.add_argument("--context", help="the kubeconfig context to use (default: its current-context)")
    g.add_argument(
        "--snapshot", type=Path, help="read this snapshot file instead of a cluster (kubectl get ... -o yaml)"
    )
    g.add_argument(
        "--demo",
        action="store_true",
        help="read kilter's embedded demo cluster instead (32 GB200 NVL72 racks, 16 MI355X nodes, running jobs, "
        "Kueue queues): try every view without a cluster",
    )
    g.add_argument(
        "--kilter-service",
        metavar="NS/NAME:PORT",
        help="ask the running kilter behind this Service (through the API server's service proxy) instead of "
        f"reading the cluster: one request, and its recorded decisions too (default: ${SERVICE_ENV})",
    )
    g.add_argument(
        "--kilter-url",
        metavar="URL",
        help="ask the kilter listening at this URL directly (http://127.0.0.1:8080: a kilter serve --snapshot of "
        "your own, or kubectl port-forward to kilter's pod)",
    )
    g.add_argument("--kilter-ca", type=Path, metavar="FILE", help="CA bundle verifying an https:// --kilter-url")
    g.add_argument("--platforms", type=Path, help="YAML file adding or overriding catalog platforms")
    sources.add_health_argument(g)
    g.add_argument("-n", "--namespace", help="the namespace (default: the context's, else default)")
    g.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    g.add_argument("-o", "--output", choices=FORMATS, default="table", help="table (default), wide, json or yaml")
    g.add_argument("--no-headers", action="store_true", help="tables without their header line")
    g.add_argument("--now", metavar="RFC3339", help="judge waits and ages at this time (default: the clock)")
    add_spare_argument(g)
    return p


def resolve_kubeconfig(flag: Path | None) -> Path | None:
    """The kubeconfig kubectl would read: the flag, ``$KUBECONFIG`` (kept whole: the client merges its list),
    ``~/.kube/config`` when it exists; None means in-cluster."""
    if flag is not None:
        return flag
    env = os.environ.get("KUBECONFIG", "")
    if env:
        return Path(env)
    home = Path.home() / ".kube" / "config"
    return home if home.is_file() else None


def _context_namespace(kubeconfig: Path | None, context: str | None) -> str | None:
    if kubeconfig is None:
        ns_file = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        return ns_file.read_text().strip() if ns_file.is_file() else None
    from kubernetes import config

    try:
        contexts, active = config.list_kube_config_contexts(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError, ValueError, TypeError) as exc:
        raise InputError(f"cannot use {kubeconfig}: {exc}") from None
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
    if context and chosen is None:
        raise InputError(f"context {context!r} is not in {kubeconfig}")
    ns = (chosen or {}).get("context", {}).get("namespace")
    return ns if isinstance(ns, str) and ns else None


@dataclass
class Cluster:
    """One reading of the cluster: the store, and the moment views judge at."""

    store: ClusterStore
    now_s: float
    namespace: str | None  # None: every namespace (-A)
    recorded: Recorded | None = None  # kilter's decision log, when kilter itself answers the view
    starts: StartsOfStore | None = None  # kilter's recent expected starts, when kilter itself answers the view

    def in_scope(self, namespace: str) -> bool:
        return self.namespace is None or namespace == self.namespace

    @property
    def runtime_window(self) -> int:
        """How many finished Workloads per size class runtimes are learned from: kilter's own setting when
        kilter answers the view, else the default every kilter starts with."""
        return self.starts.window if self.starts is not None else WINDOW

    def expected_starts(self) -> ExpectedStarts:
        """Every pending gang's expected start at ``now_s``: worked out here, or kilter's own answer of at most
        ``StartsOfStore.max_age_s`` ago when kilter answers the view (it costs about a second on a 150,000-pod
        cluster, too much to spend again on every view while the cluster changes under it)."""
        if self.starts is not None:
            return self.starts.recent(self.now_s)
        return expected_starts(self.store.state(), now_s=self.now_s, fleet=self.store.fleet())


def namespace_of(args: argparse.Namespace, kubeconfig: Path | None) -> str | None:
    """The namespace the view is scoped to, None for ``-A``."""
    if args.all_namespaces:
        return None
    if args.namespace:
        return check_namespace(args.namespace)
    if args.snapshot is None and not args.demo:
        return _context_namespace(kubeconfig, args.context) or "default"
    return "default"


def kilter_service(args: argparse.Namespace) -> str | None:
    """The Service of the kilter to ask: ``--kilter-service``, else ``$KUBECTL_KILTER_SERVICE`` unless the view
    reads a ``--snapshot``; None: the plugin reads the cluster itself."""
    if args.kilter_service:
        return str(args.kilter_service)
    if args.snapshot is None and not args.demo:
        return os.environ.get(SERVICE_ENV) or None
    return None


def connect_to(args: argparse.Namespace) -> tuple[ApiServer, Path | None]:
    """The API server of the options' kubeconfig and context (in-cluster when there is none), and that file."""
    kubeconfig = resolve_kubeconfig(args.kubeconfig)
    if kubeconfig is None and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise InputError("no cluster to read: pass --kubeconfig FILE, set KUBECONFIG, or --snapshot FILE")
    return connect(kubeconfig, context=args.context, user_agent=PLUGIN_AGENT), kubeconfig


def load(args: argparse.Namespace) -> Cluster:
    """Read the cluster (or snapshot) the options name, once."""
    now_s = sources.now_of(args)
    catalog = sources.catalog_of(args.platforms)
    store = ClusterStore(
        catalog=catalog,
        spare_nodes_default=read_spare_nodes(args.spare_nodes_per_domain, catalog),
        health=sources.health_of(args.health_signals),
    )
    objects: list[Any]
    if args.demo:
        if args.snapshot is not None or args.kubeconfig is not None or args.context:
            raise InputError("--demo reads the embedded demo cluster: leave out --snapshot, --kubeconfig and --context")
        kubeconfig = None
        objects = sources.demo_objects(catalog)
    elif args.snapshot is not None:
        if args.kubeconfig is not None or args.context:
            raise InputError("--snapshot reads a file: leave out --kubeconfig and --context")
        kubeconfig = None
        skip = frozenset() if getattr(args, "reads_pods", True) else NODES_AND_PODS
        typed, raw = snapshot_file.read(args.snapshot, KNOWN_KINDS, skip=skip)
        objects = [*typed, *(obj for objs in raw.by_kind.values() for obj in objs)]
    else:
        api, kubeconfig = connect_to(args)
        objects = list(list_cluster(api, default_resources(catalog)))
    namespace = namespace_of(args, kubeconfig)
    with no_collection():  # 150,000 pods' objects are all alive: the cyclic collector would only walk them
        store.replace(objects)
        store.fleet()
    return Cluster(store, now_s, namespace)

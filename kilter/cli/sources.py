"""Where a command's cluster state comes from: a snapshot file, a live cluster listed once, or the demo fleet."""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path
from typing import Any

from kilter.kube.api import CLI_AGENT, connect
from kilter.model.errors import InputError
from kilter.quota.policy import parse_time
from kilter.state import cluster, snapshot, snapshot_file
from kilter.state.cluster import KNOWN_KINDS, ClusterState
from kilter.state.live import default_resources, list_cluster
from kilter.state.store import ClusterStore
from kilter.topology import fleetgen, health
from kilter.topology.catalog import BUILTIN, Catalog, load_overrides
from kilter.topology.health import HealthSignals

__all__ = [
    "DEMO_QUEUES",
    "HEALTH_SIGNALS_HELP",
    "add_health_argument",
    "add_source_arguments",
    "catalog_of",
    "demo_objects",
    "demo_state",
    "health_of",
    "load_catalog",
    "load_state",
    "load_store",
    "now_of",
    "print_warnings",
]


def now_of(args: argparse.Namespace) -> float:
    """The moment a command judges at: ``--now`` (RFC 3339), else the clock (Unix seconds)."""
    return parse_time(args.now, path="--now") if args.now else time.time()


HEALTH_SIGNALS_HELP = (
    "YAML file of the node conditions, taints and labels that mark a GPU node unusable, replacing kilter's "
    "defaults ('defaults: true' in the file keeps them); see docs/health-signals.md"
)


def add_health_argument(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--health-signals FILE``: every command that judges nodes takes it, spelled one way."""
    p.add_argument("--health-signals", type=Path, metavar="FILE", help=HEALTH_SIGNALS_HELP)


def health_of(path: Path | None) -> HealthSignals:
    """The signals of a ``--health-signals`` file, else the defaults (``topology.health``)."""
    return health.load(path) if path is not None else health.DEFAULTS


def add_source_arguments(p: argparse.ArgumentParser, *, live: bool = True, nodes: bool = True) -> None:
    """--snapshot | --demo, and (``live``) --kubeconfig | --in-cluster to read a running cluster instead;
    (``nodes``: the command judges nodes) --health-signals."""
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--snapshot",
        type=Path,
        help="read the cluster from this file (kubectl get nodes,pods,topologies,... -A -o yaml)",
    )
    src.add_argument("--demo", action="store_true", help="use the embedded demo fleet")
    if live:
        src.add_argument("--kubeconfig", type=Path, help="read the cluster this kubeconfig points at (list once)")
        src.add_argument("--in-cluster", action="store_true", help="read the cluster kilter's pod runs in")
        p.add_argument("--context", help="kubeconfig context (default: its current-context)")
    p.add_argument("--platforms", type=Path, help="YAML file adding or overriding catalog platforms")
    if nodes:
        add_health_argument(p)


def load_catalog(args: argparse.Namespace) -> Catalog:
    return catalog_of(getattr(args, "platforms", None))


def catalog_of(platforms: Path | None) -> Catalog:
    """The built-in catalog, with the platforms of a ``--platforms`` YAML file added or overriding."""
    return load_overrides(platforms) if platforms else Catalog(BUILTIN)


DEMO_QUEUES = Path(__file__).with_name("demo_queues.yaml")


def demo_objects(catalog: Catalog | None = None) -> list[Any]:
    """The embedded demo cluster: the generated fleet, its Topology, and the Kueue queues of examples/queues; the
    running pods of each rack are one gang (``kilter.dev/gang``), as a training job's would be, so the views that
    show gangs (``kubectl kilter top``) have some to show."""
    nodes, pods = fleetgen.generate(fleetgen.DEMO_FLEET, catalog)
    return [*nodes, *_racks_as_gangs(nodes, pods), fleetgen.topology_object(), *snapshot.load_documents(DEMO_QUEUES)]


def _racks_as_gangs(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``pods`` with those of each rack of more than one pod labelled as one gang, ``train-<rack>``."""
    rack_of = {n["metadata"]["name"]: n["metadata"]["labels"].get(fleetgen.CLIQUE) for n in nodes}
    members: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        rack = rack_of.get(pod["spec"]["nodeName"])
        if rack is not None:
            members.setdefault(rack, []).append(pod)
    for gang in members.values():
        if len(gang) > 1:
            name = f"train-{gang[0]['spec']['nodeName'].rsplit('-t', 1)[0]}"
            for pod in gang:
                pod["metadata"]["labels"] = {
                    **pod["metadata"]["labels"],
                    "kilter.dev/gang": name,
                    "kilter.dev/gang-size": str(len(gang)),
                }
    return pods


def demo_state(catalog: Catalog | None = None, signals: HealthSignals = health.DEFAULTS) -> ClusterState:
    return cluster.from_objects(demo_objects(catalog), catalog=catalog, health=signals)


def load_state(args: argparse.Namespace, *, skip: frozenset[tuple[str, str]] = frozenset()) -> ClusterState:
    """The state the command's arguments name. ``skip``: kinds the command does not read, left unread from a
    snapshot (``cluster.load``); a live cluster or the demo has them all."""
    catalog = load_catalog(args)
    signals = health_of(getattr(args, "health_signals", None))
    if getattr(args, "demo", False):
        return demo_state(catalog, signals)
    kubeconfig = getattr(args, "kubeconfig", None)
    if kubeconfig is not None or getattr(args, "in_cluster", False):
        api = connect(kubeconfig, context=getattr(args, "context", None), user_agent=CLI_AGENT)
        return cluster.from_objects(list_cluster(api, default_resources(catalog)), catalog=catalog, health=signals)
    if args.snapshot is None:
        raise InputError(
            "no cluster to read: pass --snapshot FILE, --kubeconfig FILE or --in-cluster "
            "(or --demo for the embedded demo fleet)"
        )
    state = cluster.load(args.snapshot, catalog=catalog, skip=skip, health=signals)
    gc.freeze()  # a command reads the state it loaded until it exits: no collection need walk it again
    return state


def load_store(args: argparse.Namespace) -> ClusterStore:
    """The cluster the command's arguments name, read once into a ``ClusterStore`` (the servers' own store), for
    commands that read what the servers read of it: bookings per pod, Workloads as received."""
    catalog = load_catalog(args)
    store = ClusterStore(catalog=catalog, health=health_of(getattr(args, "health_signals", None)))
    objects: list[Any]
    if getattr(args, "demo", False):
        objects = demo_objects(catalog)
    elif getattr(args, "kubeconfig", None) is not None or getattr(args, "in_cluster", False):
        api = connect(args.kubeconfig, context=getattr(args, "context", None), user_agent=CLI_AGENT)
        objects = list(list_cluster(api, default_resources(catalog)))
    elif args.snapshot is None:
        raise InputError(
            "no cluster to read: pass --snapshot FILE, --kubeconfig FILE or --in-cluster "
            "(or --demo for the embedded demo fleet)"
        )
    else:
        typed, raw = snapshot_file.read(args.snapshot, KNOWN_KINDS)
        objects = [*typed, *(obj for objs in raw.by_kind.values() for obj in objs)]
    with snapshot_file.no_collection():
        store.replace(objects)
        store.fleet()
    return store


def print_warnings(state: ClusterState) -> None:
    for w in state.warnings:
        print(f"warning: {w}", file=sys.stderr)

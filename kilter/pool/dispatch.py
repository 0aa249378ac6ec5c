"""kilter as MultiKueue's external dispatcher: which worker clusters a waiting Workload is copied to.

Kueue's MultiKueue (``dispatcherName: kilter.dev/topology-dispatcher`` in
its Configuration) makes copies of a Workload only in the clusters named in
its ``status.nominatedClusterNames``, and the first copy admitted wins. Kueue
nominates blindly; kilter nominates the clusters whose region can take the
gang now in the fewest scale-up domains (``topology.regions.nominate``),
from the inventories the pool exchanged.

A Workload is waiting for nominations when its quota is reserved here, its
MultiKueue check (an AdmissionCheck with ``controllerName:
kueue.x-k8s.io/multikueue``) is ``Pending``, it has no ``clusterName`` and is
not finished. Its candidates are the clusters of that check's
MultiKueueConfig whose MultiKueueCluster is ``Active`` and whose region's
inventory is fresh: a cluster kilter cannot hear from is never nominated,
so a copy is never made where nobody knows whether it fits.

Nominations change only when they must: a nominated region went stale (it
is dropped), nothing admitted within ``deadline_s`` (the gang is ranked
anew), or there were none. Kueue has no timeout for an external
dispatcher's nominations, so the deadline is kilter's to keep.

The write is a server-side apply to ``workloads/NAME/status`` as
``kueue-admission``, the manager Kueue itself applies with when it sets
``clusterName`` and clears the nominations: were the nominations owned by
another manager, that apply could not clear them and the Workload would
never be admitted. Since an apply drops what its manager owned and left
out, the body carries back every field ``kueue-admission`` owns now, as
the Workload holds it (``kube.owned``), with the Workload's
``resourceVersion`` as a precondition: a Workload that changed meanwhile
is a conflict, read again next round, never overwritten.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kilter.kube.api import ApiError, ApiServer, object_path
from kilter.kube.owned import manager_fields, owned
from kilter.model.annotations import AVOID_REGIONS, DATA_REGION, REGIONS, parse_regions
from kilter.model.errors import InputError, KilterError, NoGpus
from kilter.model.jobs import read_job
from kilter.model.kueue import KUEUE_GROUP, true_condition
from kilter.pool.inventory import RegionInventory
from kilter.pool.peers import PeerTable
from kilter.pool.settings import DEFAULT_DEADLINE_S, MAX_NOMINATIONS
from kilter.state.cluster import ClusterState
from kilter.state.store import ClusterStore
from kilter.topology.catalog import Catalog
from kilter.topology.plan import gang_request
from kilter.topology.regions import GangAsk, RegionView, book, nominate

__all__ = [
    "DISPATCHER_NAME",
    "KUEUE_ADMISSION",
    "MAX_NOMINATIONS",
    "MULTIKUEUE_CONTROLLER",
    "Dispatcher",
    "Nomination",
    "Waiting",
    "Where",
    "gang_ask",
    "nomination_body",
    "waiting_workloads",
    "where_of",
]

log = logging.getLogger("kilter.pool")

DISPATCHER_NAME = "kilter.dev/topology-dispatcher"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
KUEUE_ADMISSION = "kueue-admission"
API = f"/apis/{KUEUE_GROUP}/v1beta2"


@dataclass(frozen=True)
class Waiting:
    """A Workload waiting for nominations, as this round saw it."""

    namespace: str
    name: str
    uid: str
    check: str
    config: str  # its MultiKueueConfig's name
    nominated: tuple[str, ...]
    annotations: Mapping[str, str]
    obj: Mapping[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True)
class Nomination:
    """The clusters to write for one Workload, and why (for the log and the Event)."""

    namespace: str
    name: str
    uid: str
    clusters: tuple[str, ...]
    reason: str
    based_on: tuple[str, ...] = ()  # the nominations the round saw: written only if the Workload still has them


def _condition(obj: Mapping[str, Any], kind: str) -> bool:
    return true_condition(obj.get("status"), kind) is not None


def multikueue_checks(state: ClusterState) -> dict[str, str]:
    """AdmissionCheck name -> its MultiKueueConfig's name, for MultiKueue's checks."""
    out = {}
    for ac in state.raw.of(KUEUE_GROUP, "AdmissionCheck"):
        spec = ac.get("spec") or {}
        params = spec.get("parameters") or {}
        if spec.get("controllerName") == MULTIKUEUE_CONTROLLER and params.get("kind") == "MultiKueueConfig":
            out[str((ac.get("metadata") or {}).get("name", ""))] = str(params.get("name", ""))
    return out


def waiting_workloads(state: ClusterState) -> list[Waiting]:
    """The Workloads waiting for nominations (the module's rule), by namespace and name."""
    checks = multikueue_checks(state)
    out = []
    for obj in state.raw.of(KUEUE_GROUP, "Workload"):
        meta, status = obj.get("metadata") or {}, obj.get("status") or {}
        if status.get("clusterName") or not _condition(obj, "QuotaReserved") or _condition(obj, "Finished"):
            continue
        for entry in status.get("admissionChecks") or []:
            if isinstance(entry, Mapping) and entry.get("name") in checks and entry.get("state") == "Pending":
                out.append(
                    Waiting(
                        str(meta.get("namespace", "")),
                        str(meta.get("name", "")),
                        str(meta.get("uid", "")),
                        str(entry["name"]),
                        checks[str(entry["name"])],
                        tuple(status.get("nominatedClusterNames") or ()),
                        _annotations(obj),
                        obj,
                    )
                )
                break
    return sorted(out, key=lambda w: (w.namespace, w.name))


def _annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    """The region annotations: the Workload's own, else its first pod set's template's (what Kueue copies)."""
    own = dict((obj.get("metadata") or {}).get("annotations") or {})
    for ps in (obj.get("spec") or {}).get("podSets") or []:
        template = (ps.get("template") or {}).get("metadata") or {} if isinstance(ps, Mapping) else {}
        for key, value in (template.get("annotations") or {}).items():
            own.setdefault(key, value)
        break
    return {k: str(v) for k, v in own.items() if k in (REGIONS, AVOID_REGIONS, DATA_REGION)}


def _platforms(catalog: Catalog, resource: str, selector: Mapping[str, str]) -> tuple[str, ...]:
    """The catalog platforms with the gang's device resource that its pods' node selector allows."""
    out = []
    for p in catalog.platforms:
        if p.device_resource != resource:
            continue
        named = selector.get("kilter.dev/platform")
        if named is not None and catalog.get(named).name != p.name:
            continue
        if any(k in selector for k in p.product_label_keys) and not p.matches_product(selector):
            continue
        out.append(p.name)
    return tuple(out)


@dataclass(frozen=True)
class Where:
    """Where a Workload's annotations let it go: ``kilter.dev/regions`` (best first), ``avoid-regions``, its data."""

    allowed: tuple[str, ...] = ()
    avoided: frozenset[str] = frozenset()
    data_region: str = ""

    def admits(self, region: str) -> bool:
        return region not in self.avoided and (not self.allowed or region in self.allowed)


def where_of(w: Waiting) -> Where:
    """The region annotations of ``w``; InputError naming the annotation when a name is not a region's."""
    notes = w.annotations
    data = parse_regions(notes.get(DATA_REGION, ""), what=DATA_REGION)
    return Where(
        parse_regions(notes.get(REGIONS, ""), what=REGIONS),
        frozenset(parse_regions(notes.get(AVOID_REGIONS, ""), what=AVOID_REGIONS)),
        data[0] if data else "",
    )


def gang_ask(w: Waiting, catalog: Catalog, home: str, where: Where | None = None) -> GangAsk:
    """What ``topology.regions`` ranks for ``w``: the platforms and shape of its pods, every gang's (its largest
    pods, and the GPUs of the smaller ones), its queue, and its region annotations. InputError when a gang cannot
    be read as one (no GPU pod set, a device resource the catalog does not know...)."""
    where = where if where is not None else where_of(w)
    job = read_job(dict(w.obj))
    if not job.gangs:
        raise NoGpus(f"{w.namespace}/{w.name}: no pod set asks for GPUs")
    requests = [gang_request(f"{w.namespace}/{w.name}", gang, catalog) for gang in job.gangs]  # every gang
    selector: dict[str, str] = {}
    for ps in (ps for request in requests for ps in request.pod_sets):
        selector.update(ps.spec.node_selector)
    platforms = _platforms(catalog, requests[0].resource, selector)
    queue = str((w.obj.get("spec") or {}).get("queueName") or "")
    return GangAsk.of_pod_sets(
        ((ps.count, ps.gpus_per_pod) for request in requests for ps in request.pod_sets),
        platforms=platforms,
        home=home,
        queue=f"{w.namespace}/{queue}" if queue else "",
        allowed=where.allowed,
        avoided=where.avoided,
        data_region=where.data_region,
    )


def nomination_body(live: Mapping[str, Any], clusters: Sequence[str]) -> dict[str, Any]:
    """The apply body that sets ``nominatedClusterNames`` to ``clusters`` ([]: none) as ``kueue-admission``,
    carrying back everything that manager owns of the status now, under the live object's resourceVersion."""
    meta = live.get("metadata") or {}
    fields = manager_fields(live, KUEUE_ADMISSION, subresource="status").get("f:status", {})
    status = owned(live.get("status") or {}, fields) if fields else {}
    status = dict(status) if isinstance(status, Mapping) else {}
    status.pop("nominatedClusterNames", None)
    if clusters:
        status["nominatedClusterNames"] = list(clusters)
    return {
        "apiVersion": f"{KUEUE_GROUP}/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "status": status,
    }


class Dispatcher:
    """Nominates worker clusters for this region's waiting Workloads, a round every ``interval_s``.

    ``cluster_regions`` maps each MultiKueueCluster name to the pool region it reaches (a cluster not named is
    never nominated). MultiKueueConfigs and MultiKueueClusters are read through ``api`` each round: a handful
    of objects, needed only here."""

    def __init__(
        self,
        store: ClusterStore,
        api: ApiServer,
        table: PeerTable,
        cluster_regions: Mapping[str, str],
        *,
        interval_s: float = 2.0,
        deadline_s: float = DEFAULT_DEADLINE_S,
        at_most: int = 3,
        wall: Callable[[], float] = time.time,
        is_writer: Callable[[], bool] = lambda: True,
    ) -> None:
        self.store = store
        self.api = api
        self.table = table
        self.cluster_regions = dict(cluster_regions)
        self.interval_s = interval_s
        self.deadline_s = deadline_s
        self.at_most = min(at_most, MAX_NOMINATIONS)
        self.wall = wall
        self.is_writer = is_writer
        self.since: dict[str, float] = {}  # Workload uid -> when its current nominations were written or first seen
        self.written: dict[str, int] = {}  # outcome (nominated, cleared, conflict, failed, unplaceable) -> count
        self.unreadable: set[str] = set()  # Workloads whose region annotations do not read, reported once
        self._asks: dict[tuple[str, str], GangAsk | None] = {}

    def _count(self, outcome: str) -> None:
        self.written[outcome] = self.written.get(outcome, 0) + 1

    def candidates(self) -> dict[str, tuple[str, ...]]:
        """MultiKueueConfig name -> its clusters that are Active (read through the API)."""
        clusters = self.api.call("GET", f"{API}/multikueueclusters")
        active = {
            str((c.get("metadata") or {}).get("name", ""))
            for c in clusters.get("items") or []
            if _condition(c, "Active")
        }
        out: dict[str, tuple[str, ...]] = {}
        for config in self.api.call("GET", f"{API}/multikueueconfigs").get("items") or []:
            name = str((config.get("metadata") or {}).get("name", ""))
            listed = (config.get("spec") or {}).get("clusters") or []
            out[name] = tuple(str(c) for c in listed if c in active)
        return out

    def decide(self, configs: Mapping[str, Sequence[str]], now: float) -> list[Nomination]:
        """The nominations to write this round (see the module docstring for when they change)."""
        state = self.store.state()
        fresh = self.table.fresh(now)
        out = []
        seen = set()
        booked: dict[str, RegionView] = {}  # this round's views with the gangs nominated so far taken out
        for w in waiting_workloads(state):
            seen.add(w.uid)
            try:
                made = self._decide_one(w, state.catalog, configs, fresh, booked, now)
            except Exception:  # one Workload kilter cannot judge must not stop the others' dispatch
                self._count("failed")
                log.exception("dispatching %s/%s failed", w.namespace, w.name, extra={"workload": w.name})
                continue
            if made is not None:
                out.append(made)
        for gone in set(self.since) - seen:
            del self.since[gone]
        self.unreadable &= seen
        self._asks = {key: ask for key, ask in self._asks.items() if key[0] in seen}
        return out

    def _decide_one(
        self,
        w: Waiting,
        catalog: Catalog,
        configs: Mapping[str, Sequence[str]],
        fresh: Mapping[str, RegionInventory],
        booked: dict[str, RegionView],
        now: float,
    ) -> Nomination | None:
        usable = {
            c: self.cluster_regions[c]
            for c in configs.get(w.config, ())
            if c in self.cluster_regions and self.cluster_regions[c] in fresh
        }
        try:
            where = where_of(w)
        except InputError as exc:
            if w.uid not in self.unreadable:
                self.unreadable.add(w.uid)
                self._count("unplaceable")
                log.warning("not dispatching %s/%s: %s", w.namespace, w.name, exc, extra={"workload": w.name})
            return None
        usable = {c: r for c, r in usable.items() if where.admits(r)}
        ask = self._ask(w, catalog, where)
        by_region: dict[str, list[str]] = {}
        for cluster, region in sorted(usable.items()):
            by_region.setdefault(region, []).append(cluster)
        if ask is None:  # not a gang kilter can rank: every reachable cluster, as Kueue's all-at-once would
            best = sorted(usable)[:MAX_NOMINATIONS]
        else:
            views = [booked.get(r) or fresh[r].view(now) for r in sorted(by_region)]
            best = [c for r in nominate(ask, views, at_most=self.at_most) for c in by_region[r][:1]]
        kept = tuple(c for c in w.nominated if c in usable)
        started = self.since.setdefault(w.uid, now)
        chosen: tuple[str, ...] | None = None
        reason = ""
        if not w.nominated:
            if best:
                chosen, reason = tuple(best), "fits now" if ask is not None else "not a gang kilter ranks: all"
        elif kept != w.nominated:
            chosen, reason = tuple(best or kept), f"stale: {', '.join(sorted(set(w.nominated) - set(kept)))}"
        elif now - started >= self.deadline_s:
            self.since[w.uid] = now
            if tuple(best) != w.nominated:
                chosen, reason = tuple(best), "not admitted in time"
        held = chosen if chosen is not None else w.nominated
        if ask is not None and held and held[0] in usable:
            first = usable[held[0]]
            booked[first] = book(booked.get(first) or fresh[first].view(now), ask)
        if chosen is None:
            return None
        return Nomination(w.namespace, w.name, w.uid, chosen, reason, based_on=w.nominated)

    def _ask(self, w: Waiting, catalog: Catalog, where: Where) -> GangAsk | None:
        """``gang_ask`` for ``w``, kept per (uid, resourceVersion): reading the job again every round for a
        Workload that did not change would cost the event loop for nothing. None: not a gang kilter ranks."""
        version = str((w.obj.get("metadata") or {}).get("resourceVersion", ""))
        key = (w.uid, version)
        if key not in self._asks:
            try:
                self._asks[key] = gang_ask(w, catalog, self.table.region, where)
            except KilterError:
                self._asks[key] = None
        return self._asks[key]

    def write(self, n: Nomination) -> bool:
        """Read the Workload, apply its nominations as ``kueue-admission``; False on a conflict or failure."""
        path = object_path(API, "workloads", n.name, namespace=n.namespace)
        try:
            live = self.api.call("GET", path)
            status = live.get("status") or {}
            if (live.get("metadata") or {}).get("uid") != n.uid or status.get("clusterName"):
                return False  # replaced, or admitted somewhere, since the round's state
            if tuple(status.get("nominatedClusterNames") or ()) != n.based_on:
                self._count("conflict")  # nominated since the state the round saw (a watch behind): next round
                return False
            self.api.apply(f"{path}/status", nomination_body(live, n.clusters), field_manager=KUEUE_ADMISSION)
        except ApiError as exc:
            self._count("conflict" if exc.code == 409 else "failed")
            log.info("nominations of %s/%s not written: %s", n.namespace, n.name, exc, extra={"workload": n.name})
            return False
        self.since[n.uid] = self.wall()
        self._count("nominated" if n.clusters else "cleared")
        log.info(
            "nominated %s for %s/%s (%s)",
            ", ".join(n.clusters) or "nothing",
            n.namespace,
            n.name,
            n.reason,
            extra={"workload": f"{n.namespace}/{n.name}"},
        )
        return True

    async def run_once(self) -> list[Nomination]:
        loop = asyncio.get_running_loop()
        if not self.store.ready:
            return []
        configs = await loop.run_in_executor(None, self.candidates)
        decided = self.decide(configs, self.wall())
        written = []
        for n in decided:
            if await loop.run_in_executor(None, partial(self.write, n)):
                written.append(n)
        return written

    async def run(self) -> None:
        """Rounds while this replica writes (the leader), until cancelled; a failed round is logged."""
        while True:
            if self.is_writer():
                try:
                    await self.run_once()
                except (KilterError, OSError) as exc:
                    log.warning("dispatch round failed: %s", exc)
                except Exception:  # a round kilter did not foresee: logged whole, and the next round comes
                    log.exception("dispatch round failed")
            await asyncio.sleep(self.interval_s)

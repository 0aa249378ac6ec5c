"""Gang plans recorded in the cluster, so that a restarted kilter or a second replica keeps the same placement.

A plan lives in memory (``gangs.GangBook``); without a copy in the cluster a
kilter that restarts after a gang's first pods were bound plans the rest
afresh, and may put them in another scale-up domain. So each plan kilter
makes is written, as the annotation ``kilter.dev/plan``, on the object that
owns the gang:

* a Volcano PodGroup (gangs keyed ``NS/podgroup/NAME``),
* a Kueue Workload (``NS/workload/NAME``),
* otherwise (``kilter.dev/gang`` labels, Kueue pod groups, LeaderWorkerSet
  groups, JobSet and Kubeflow jobs) every pod of the gang that was still
  unbound when the plan was made.

The value is compact JSON, one ``[node, GPUs]`` pair per planned pod::

    {"v":1,"gang":"ml/gang/train","at":"2025-06-01T12:00:00Z","slots":[["gb200-r01-t00",4],["gb200-r01-t01",4]]}

``v`` is the format version (readers ignore versions they do not know),
``gang`` the gang's key (a record naming another gang is ignored), ``at``
when the plan was made (RFC 3339, UTC). Reading never raises: a record that
does not decode is ignored with a log line and the gang is planned afresh.
Where the pods carry records, the newest one counts. ``fit`` says whether a
record still fits the fleet for the pods left to place; the gang book takes a
record up only while it is younger than the gang timeout, the time the plan
would have lived in memory, so a gang stuck on its plan still gets a new one.

Records are written by ``PlanRecorder`` as JSON merge patches (RFC 7386,
``application/merge-patch+json``) of ``metadata.annotations`` only, on one
worker thread, so a verb never waits for the API server; only while
``is_writer()`` holds (the elected leader), and a failed write is logged,
never raised. A record over ``MAX_BYTES`` (a gang of several thousand pods;
the API server allows 256 KiB of annotations per object) is not written.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import msgspec

from kilter.kube.api import ApiServer
from kilter.model.annotations import PLAN
from kilter.model.core_v1 import Pod, pod_request
from kilter.model.errors import InputError, KilterError
from kilter.state.store import ObjectKey
from kilter.topology import eligibility
from kilter.topology.fleet import Fleet
from kilter.topology.plan import MAX_GANG_PODS, MAX_POD_GPUS, GangRequest

if TYPE_CHECKING:
    from kilter.extenders.gangs import GangId, GangPlan

__all__ = [
    "MERGE_PATCH",
    "PLAN_ANNOTATION",
    "Fit",
    "PlanRecord",
    "PlanRecorder",
    "decode",
    "encode",
    "fit",
    "newest",
    "owner_of",
    "read_object",
]

log = logging.getLogger("kilter.plans")

PLAN_ANNOTATION = PLAN
RECORD_VERSION = 1
MERGE_PATCH = "application/merge-patch+json"
MAX_BYTES = 128 * 1024  # the API server caps all annotations of an object at 256 KiB together
VOLCANO = "scheduling.volcano.sh"
KUEUE = "kueue.x-k8s.io"
KUEUE_DEFAULT_VERSION = "v1beta2"


@dataclass(frozen=True)
class PlanRecord:
    """A recorded plan: the gang's key, when it was made (Unix seconds), and (node, GPUs) per planned pod."""

    gang: str
    at_s: float
    slots: tuple[tuple[str, int], ...]

    @property
    def at(self) -> str:
        return _rfc3339(self.at_s)


class _Wire(msgspec.Struct):
    v: int
    gang: str
    at: str
    slots: list[tuple[str, int]]


_decoder = msgspec.json.Decoder(_Wire)
_encoder = msgspec.json.Encoder()


def _rfc3339(t: float) -> str:
    try:
        return datetime.datetime.fromtimestamp(int(t), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):  # a record's time can be any RFC 3339 time, e.g. year 1 at +01:00
        return f"{t:.0f} s after 1970"


def encode(record: PlanRecord) -> str:
    """The annotation's value (compact JSON, keys in the documented order)."""
    wire = _Wire(RECORD_VERSION, record.gang, record.at, [(n, g) for n, g in record.slots])
    return _encoder.encode(wire).decode()


def decode(raw: str, *, where: str) -> PlanRecord | None:
    """The record in an annotation's value; None (and one log line naming ``where``) for anything else."""
    if not raw.lstrip().startswith("{"):
        # Not JSON: e.g. the plan's name that the AdmissionCheck's podSetUpdates put on pods.
        log.info("%s: %s is not a plan record (%.60r); ignored", where, PLAN_ANNOTATION, raw)
        return None
    try:
        wire = _decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        log.warning("%s: %s does not decode (%s); ignored", where, PLAN_ANNOTATION, exc)
        return None
    problem = _problem(wire)
    if problem:
        log.warning("%s: %s %s; ignored", where, PLAN_ANNOTATION, problem)
        return None
    at = datetime.datetime.fromisoformat(wire.at)
    return PlanRecord(wire.gang, at.timestamp(), tuple(wire.slots))


def _problem(wire: _Wire) -> str:
    """What makes a decoded record unusable ("" if nothing)."""
    if wire.v != RECORD_VERSION:
        return f"has format version {wire.v}; this kilter reads version {RECORD_VERSION}"
    if not wire.gang:
        return "names no gang"
    try:
        at = datetime.datetime.fromisoformat(wire.at)
    except ValueError:
        return f"has a time that is not RFC 3339: {wire.at!r}"
    if at.tzinfo is None:
        return f"has a time without a zone: {wire.at!r}"
    if not 1 <= len(wire.slots) <= MAX_GANG_PODS:
        return f"has {len(wire.slots)} slots; a gang has 1 to {MAX_GANG_PODS} pods"
    for i, (node, gpus) in enumerate(wire.slots):
        if not node or not 1 <= gpus <= MAX_POD_GPUS:
            return f"has a bad slot at $.slots[{i}]: {[node, gpus]!r}"
    return ""


def owner_of(gang_key: str) -> ObjectKey | None:
    """The object a gang's record goes on (PodGroup or Workload), or None when it goes on the gang's pods."""
    namespace, _, rest = gang_key.partition("/")
    kind, _, name = rest.partition("/")
    if not name or "/" in name:
        return None
    if kind == "podgroup":
        return VOLCANO, "PodGroup", namespace, name
    if kind == "workload":
        return KUEUE, "Workload", namespace, name
    return None


def read_object(obj: Mapping[str, Any] | None, *, where: str) -> PlanRecord | None:
    """The record an object (as the store holds it) carries, if any."""
    meta = obj.get("metadata") if obj is not None else None
    notes = meta.get("annotations") if isinstance(meta, Mapping) else None
    raw = notes.get(PLAN_ANNOTATION) if isinstance(notes, Mapping) else None
    return decode(raw, where=where) if isinstance(raw, str) else None


def newest(pods: Iterable[Pod]) -> PlanRecord | None:
    """The newest record among the pods' annotations (each distinct value decoded once; ties: first pod by name)."""
    found: dict[str, PlanRecord | None] = {}
    best: PlanRecord | None = None
    for pod in sorted(pods, key=lambda p: p.metadata.name):
        raw = pod.metadata.annotations.get(PLAN_ANNOTATION)
        if raw is None:
            continue
        if raw not in found:
            found[raw] = decode(raw, where=f"pod {pod.metadata.namespace}/{pod.metadata.name}")
        record = found[raw]
        if record is not None and (best is None or record.at_s > best.at_s):
            best = record
    return best


@dataclass(frozen=True)
class Fit:
    """How a record fits the fleet now: slots the gang's bound pods hold, and the open slots to reserve."""

    taken: tuple[tuple[str, int, int, str], ...]  # (node, node index, GPUs, pod uid)
    open: tuple[tuple[str, int, int], ...]  # (node, node index, GPUs), in the record's order

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(g for _, _, g in self.open)


def fit(record: PlanRecord, request: GangRequest, members: Sequence[Pod], fleet: Fleet) -> Fit | str:
    """Whether the gang's pods still to place can take up ``record`` on ``fleet``; the reason when not.

    Bound pods of the gang take the slots on their nodes (by name order) as
    long as more slots are left than pods to place: a plan made after some
    pods were bound has no slots for them. The open slots must then match the
    pods to place in number and GPUs, and each slot's node must still exist,
    be usable, carry the gang's GPU kind, admit the pods (selectors, affinity,
    taints) and have the GPUs free.
    """
    wanted = sorted(ps.gpus_per_pod for ps in request.pod_sets for _ in range(ps.count))
    open_slots = list(record.slots)
    taken: list[tuple[str, int, int, str]] = []
    for pod in sorted((p for p in members if p.spec.node_name), key=lambda p: p.metadata.name):
        if len(open_slots) <= len(wanted):
            break
        meta = pod.metadata
        try:
            gpus = pod_request(pod.spec, request.resource, path=f"pod {meta.namespace}/{meta.name}: spec")
        except InputError:
            continue
        at = next((i for i, slot in enumerate(open_slots) if slot == (pod.spec.node_name, gpus)), None)
        if at is None:
            continue
        node, _ = open_slots.pop(at)
        index = fleet.node_index.get(node)
        if index is not None:
            taken.append((node, index, gpus, meta.uid or f"{meta.namespace}/{meta.name}"))
    if sorted(g for _, g in open_slots) != wanted:
        shapes = sorted({g for _, g in open_slots})
        return f"{len(open_slots)} open slots of {shapes} GPUs for {len(wanted)} pods of {sorted(set(wanted))}"
    problem = _unfit_node(fleet, request, open_slots)
    if problem:
        return problem
    return Fit(tuple(taken), tuple((node, fleet.node_index[node], g) for node, g in open_slots))


def _unfit_node(fleet: Fleet, request: GangRequest, slots: Sequence[tuple[str, int]]) -> str:
    """Why the slots' nodes cannot take the pods now ("" if they can)."""
    mask: eligibility.Mask | None = None
    for ps in request.pod_sets:
        m = eligibility.node_mask(fleet, ps.spec, path=f"pod set {ps.name}: spec")
        if m is not None:
            mask = m if mask is None else (mask & m)
    need: dict[int, int] = {}
    for node, gpus in slots:
        index = fleet.node_index.get(node)
        if index is None:
            return f"node {node} is gone"
        if not fleet.bitmap.node_usable_flags[index]:
            return f"node {node} is not usable"
        if fleet.platform_of_node(index).device_resource != request.resource:
            return f"node {node} has no {request.resource}"
        if mask is not None and not mask[index]:
            return f"the pods' selectors or tolerations exclude node {node}"
        need[index] = need.get(index, 0) + gpus
    for index, gpus in need.items():
        free = int(fleet.bitmap.node_free_gpus(index))
        if free < gpus:
            return f"node {fleet.node_names[index]} has {free} GPUs free; the plan puts {gpus} there"
    return ""


def _always() -> bool:
    return True


class PlanRecorder:
    """Writes each new plan's record into the cluster (``GangBook``'s ``on_planned`` hook); never raises or waits.

    ``is_writer`` is asked before every write (leader election supplies it;
    a follower writes nothing). ``kueue_version`` names the Workload API
    version the live feed found ("" when unknown: v1beta2).
    """

    def __init__(
        self,
        api: ApiServer,
        *,
        is_writer: Callable[[], bool] = _always,
        kueue_version: Callable[[], str] | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.is_writer = is_writer
        self.kueue_version = kueue_version
        self.wall = wall
        self.written = 0
        self.failed = 0
        self._stop_at: float | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kilter-plans")

    def on_planned(self, gang: GangId, plan: GangPlan) -> Future[None] | None:
        """Queue the record of ``plan`` (called on the event loop when a plan is made); its future, if queued."""
        if not self.is_writer():
            return None
        record = PlanRecord(gang.key, self.wall(), tuple((s.node, s.gpus) for s in plan.slots))
        value = encode(record)
        if len(value) > MAX_BYTES:
            log.warning(
                "gang %s: the plan's record is %d bytes, over %d; not recorded", gang.key, len(value), MAX_BYTES
            )
            return None
        paths = self.paths(gang.key, plan.pods)
        if not paths:
            log.info("gang %s: no object to record the plan on", gang.key)
            return None
        try:
            return self._pool.submit(self._write, gang.key, paths, value)
        except RuntimeError:  # shut down: the server is stopping
            log.info("gang %s: plan not recorded, kilter is stopping", gang.key)
            return None

    def paths(self, gang_key: str, pods: Sequence[str]) -> list[str]:
        """Where the record goes: the owner object's path, else each pod's."""
        owner = owner_of(gang_key)
        namespace = gang_key.partition("/")[0]
        ns = quote(namespace)
        if owner is not None:
            name = quote(owner[3])
            if owner[1] == "PodGroup":
                return [f"/apis/{VOLCANO}/v1beta1/namespaces/{ns}/podgroups/{name}"]
            version = (self.kueue_version() if self.kueue_version is not None else "") or KUEUE_DEFAULT_VERSION
            return [f"/apis/{KUEUE}/{version}/namespaces/{ns}/workloads/{name}"]
        return [f"/api/v1/namespaces/{ns}/pods/{quote(pod)}" for pod in pods]

    def _write(self, gang_key: str, paths: list[str], value: str) -> None:
        body = {"metadata": {"annotations": {PLAN_ANNOTATION: value}}}
        for i, path in enumerate(paths):
            if self._stop_at is not None and time.monotonic() > self._stop_at:
                log.warning("gang %s: kilter is stopping; %d plan records not written", gang_key, len(paths) - i)
                return
            try:
                if not self.is_writer():
                    log.debug("gang %s: not the leader; plan not recorded", gang_key)
                    return
                self.api.call("PATCH", path, body, content_type=MERGE_PATCH)
                self.written += 1
            except KilterError as exc:
                self.failed += 1
                log.warning("gang %s: plan record on %s not written: %s", gang_key, path, exc)
            except Exception:  # a bug must not kill the writer thread silently
                self.failed += 1
                log.exception("gang %s: plan record on %s not written", gang_key, path)

    def close(self, timeout_s: float = 5.0) -> None:
        """Write what is queued for up to ``timeout_s`` more, then stop."""
        self._stop_at = time.monotonic() + timeout_s
        self._pool.shutdown(wait=True)

"""Gang plans recorded in the cluster, so that a restarted kilter or a second replica keeps the same placement.

A plan lives in memory (``book.GangBook``); without a copy in the cluster a
kilter that restarts after a gang's first pods were bound plans the rest
afresh, and may put them in another scale-up domain. So each plan kilter
makes is written, as the annotation ``kilter.dev/plan``, on the object that
owns the gang:

* a Volcano PodGroup (gangs keyed ``NS/podgroup/NAME``),
* a Kueue Workload (``NS/workload/NAME``); the AdmissionCheck also puts
  the record of each pod set it does not pin to one domain on that pod set's
  pods (podSetUpdates), with the slots of that pod set only,
* otherwise (``kilter.dev/gang`` labels, Kueue pod groups, LeaderWorkerSet
  groups, JobSet and Kubeflow jobs) every pod of the gang that was still
  unbound when the plan was made.

The value is compact JSON, one ``[node, GPUs]`` pair per planned pod::

    {"v":1,"gang":"ml/gang/train","at":"2025-06-01T12:00:00Z","slots":[["gb200-r01-t00",4],["gb200-r01-t01",4]]}

``v`` is the format version (readers ignore versions they do not know),
``gang`` the gang's key (a record naming another gang is ignored), ``at``
when the plan was made (RFC 3339, UTC). Reading never raises: a record that
does not decode is ignored with a log line and the gang is planned afresh.
Where the pods carry records, the newest one counts. ``refit.fit`` says
whether a record still fits the fleet for the pods left to place; the gang
book takes a record up only while it is younger than the gang timeout, the
time the plan would have lived in memory, so a gang stuck on its plan still
gets a new one. ``recorder.PlanRecorder`` writes the records. A record over
``MAX_BYTES`` (a gang of several thousand pods; the API server allows 256 KiB
of annotations per object) is not written.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from kilter.gangs.identity import GangKey
from kilter.model.annotations import PLAN
from kilter.model.core_v1 import Pod
from kilter.model.errors import InputError
from kilter.state.store import ObjectKey
from kilter.topology.plan import MAX_GANG_PODS, MAX_POD_GPUS

__all__ = [
    "KUEUE",
    "MAX_BYTES",
    "PLAN_ANNOTATION",
    "VOLCANO",
    "PlanRecord",
    "decode",
    "encode",
    "newest",
    "owner_of",
    "read_object",
]

log = logging.getLogger("kilter.plans")

PLAN_ANNOTATION = PLAN
RECORD_VERSION = 1
MAX_BYTES = 128 * 1024  # the API server caps all annotations of an object at 256 KiB together
VOLCANO = "scheduling.volcano.sh"
KUEUE = "kueue.x-k8s.io"


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


def owner_of(gang_key: str | GangKey) -> ObjectKey | None:
    """The object a gang's record goes on (PodGroup or Workload), or None when it goes on the gang's pods."""
    if isinstance(gang_key, str):
        try:
            gang_key = GangKey.parse(gang_key)
        except InputError:
            return None
    if gang_key.kind == "podgroup":
        return VOLCANO, "PodGroup", gang_key.namespace, gang_key.name
    if gang_key.kind == "workload":
        return KUEUE, "Workload", gang_key.namespace, gang_key.name
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

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

The value is compact JSON, one ``[node, GPUs]`` pair per planned pod, and a
signature::

    {"v":2,"gang":"ml/gang/train","at":"2025-06-01T12:00:00Z","slots":[["gb200-r01-t00",4],["gb200-r01-t01",4]],
     "sig":"<64 hex digits>"}

``v`` is the format version (readers ignore versions they do not know; v1
records, unsigned, are ignored), ``gang`` the gang's key (a record naming
another gang is ignored), ``at`` when the plan was made (RFC 3339, UTC, whole
seconds, ``Z``). A repair plan's record adds ``repaired`` after ``slots``:
one ``[slot, old node, rung]`` per replacement (``[3,"gb200-r01-t03","same
scale-up domain"]``: slot 3 is now on the node ``slots`` lists, in place of
that one), so that a restarted kilter, the other replica and ``kubectl kilter
explain`` can still say what the repair replaced by what; it is absent from
every other record, which therefore reads and verifies as before. ``sig`` is the hex HMAC-SHA256 (``keys.PlanKeys``) of
``signed_message``: the bytes ``kilter.dev/plan`` LF, the UID of the object
the record is on, LF, then the record's JSON without ``sig`` exactly as
written above (keys in that order, no spaces). A record in a Workload's
podSetUpdates is signed with the Workload's UID (the pods it reaches do not
exist yet), and verifies on those pods too. Only signed records that a key
verifies are adopted (``read_object``, ``newest``): anyone who may annotate a
pod could otherwise steer where its gang goes. Reading never raises: a record
that does not decode or verify is ignored with a log line and the gang is
planned afresh. Where the pods carry records, the newest one counts. ``refit.fit`` says
whether a record still fits the fleet for the pods left to place; the gang
book takes a record up only while it is younger than the gang timeout, the
time the plan would have lived in memory, so a gang stuck on its plan still
gets a new one. ``recorder.PlanRecorder`` writes the records. A record over
``MAX_BYTES`` (a gang of several thousand pods; the API server allows 256 KiB
of annotations per object) is not written.
"""

from __future__ import annotations

import datetime
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from kilter.gangs import pod_facts
from kilter.gangs.identity import GangKey
from kilter.gangs.keys import PlanKeys
from kilter.model import codec
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
    "record_time",
    "signed_message",
    "verifies",
]

log = logging.getLogger("kilter.plans")

PLAN_ANNOTATION = PLAN
RECORD_VERSION = 2
MAX_BYTES = 128 * 1024  # the API server caps all annotations of an object at 256 KiB together
_MAX_NAME = 253  # a node name (a DNS subdomain), and the longest rung's words, in a record's ``repaired``
VOLCANO = "scheduling.volcano.sh"
KUEUE = "kueue.x-k8s.io"


@dataclass(frozen=True)
class PlanRecord:
    """A recorded plan: the gang's key, when it was made (Unix seconds), and (node, GPUs) per planned pod.

    ``sig`` is the signature it was read with ("" when unsigned); records are
    compared by content only. ``repaired``: a repair plan's (slot, old node, rung) per replacement.
    """

    gang: str
    at_s: float
    slots: tuple[tuple[str, int], ...]
    sig: str = field(default="", compare=False)
    repaired: tuple[tuple[int, str, str], ...] = ()

    @property
    def at(self) -> str:
        return _rfc3339(self.at_s)


class _Body(msgspec.Struct, omit_defaults=True):
    v: int
    gang: str
    at: str
    slots: list[tuple[str, int]]
    repaired: list[tuple[int, str, str]] = []


class _Wire(_Body):
    sig: str = ""


_decoder = codec.JsonDecoder(_Wire)  # a record nested past the recursion limit is bad JSON, not a RecursionError
_encoder = msgspec.json.Encoder()


def _rfc3339(t: float) -> str:
    try:
        return datetime.datetime.fromtimestamp(int(t), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):  # a record's time can be any RFC 3339 time, e.g. year 1 at +01:00
        return f"{t:.0f} s after 1970"


def _body(record: PlanRecord) -> bytes:
    slots = [(n, g) for n, g in record.slots]
    return _encoder.encode(_Body(RECORD_VERSION, record.gang, record.at, slots, [*record.repaired]))


def signed_message(record: PlanRecord, uid: str) -> bytes:
    """What ``sig`` signs: ``kilter.dev/plan``, LF, the object's UID, LF, the record's JSON without ``sig``."""
    return b"%s\n%s\n%s" % (PLAN_ANNOTATION.encode(), uid.encode(), _body(record))


def encode(record: PlanRecord, *, keys: PlanKeys | None = None, uid: str = "") -> str:
    """The annotation's value (compact JSON, keys in the documented order), signed for the object ``uid`` with
    ``keys``; without keys unsigned, which no reader adopts (a decision's identity, a test's junk)."""
    body = _body(record)
    if keys is None:
        return body.decode()
    sig = keys.sign(signed_message(record, uid))
    return (body[:-1] + b',"sig":"' + sig.encode() + b'"}').decode()


def verifies(record: PlanRecord, keys: PlanKeys, uids: Iterable[str]) -> bool:
    """Whether one of ``keys`` signed ``record`` for one of the object ``uids`` (empty ones are skipped)."""
    return bool(record.sig) and any(keys.verify(signed_message(record, uid), record.sig) for uid in uids if uid)


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
    return PlanRecord(wire.gang, at.timestamp(), tuple(wire.slots), wire.sig, tuple(wire.repaired))


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
    if len(wire.repaired) > len(wire.slots):
        return f"has {len(wire.repaired)} repairs for {len(wire.slots)} slots"
    for i, (slot, was, how) in enumerate(wire.repaired):
        if not 0 <= slot < len(wire.slots) or len(was) > _MAX_NAME or not 0 < len(how) <= _MAX_NAME:
            return f"has a bad repair at $.repaired[{i}]: {[slot, was[:40], how[:40]]!r}"
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


def read_object(obj: Mapping[str, Any] | None, *, where: str, keys: PlanKeys) -> PlanRecord | None:
    """The record an object (as the store holds it) carries, if any and signed for that object by ``keys``."""
    meta = obj.get("metadata") if obj is not None else None
    notes = meta.get("annotations") if isinstance(meta, Mapping) else None
    raw = notes.get(PLAN_ANNOTATION) if isinstance(notes, Mapping) else None
    record = decode(raw, where=where) if isinstance(raw, str) else None
    uid = meta.get("uid") if isinstance(meta, Mapping) else None
    return _trusted(record, keys, (uid if isinstance(uid, str) else "",), where)


def newest(pods: Iterable[Pod], *, keys: PlanKeys, owner_uid: Callable[[str], str] | None = None) -> PlanRecord | None:
    """The newest record among the pods' annotations that ``keys`` verify for the pod, or for the owner object
    ``owner_uid`` gives the UID of (by the record's gang key: a podSetUpdates record); ties: first pod by name.

    Each pod of a gang carries the record signed for itself, so no two values
    are alike, and a 512-pod gang's record lists 512 slots: decoding and
    verifying every one costs a repair decision 50 ms. So only each value's
    time is read first (msgspec passes over the slots), and values are
    decoded and verified newest first until one verifies. The others are
    sorted only when the newest does not verify.
    """
    heard: list[tuple[float, str, Pod, str]] = []
    for pod in pods:
        raw, at = pod_facts.record_time(pod, record_time)
        if raw is None:
            continue
        if at is None:  # decoded in full only to say what is wrong with it
            decode(raw, where=f"pod {pod.metadata.namespace}/{pod.metadata.name}")
            continue
        heard.append((-at, pod.metadata.name, pod, raw))
    if not heard:
        return None
    first = min(heard, key=_order)  # nearly always the one: the full sort only when it does not verify
    for _, _, pod, raw in itertools.chain((first,), _sorted_rest(heard, first)):
        where = f"pod {pod.metadata.namespace}/{pod.metadata.name}"
        record = decode(raw, where=where)
        if record is None:
            continue
        uids = (pod.metadata.uid, owner_uid(record.gang) if owner_uid is not None else "")
        if _trusted(record, keys, uids, where) is not None:
            return record
    return None


def _sorted_rest(
    heard: list[tuple[float, str, Pod, str]], first: tuple[float, str, Pod, str]
) -> Iterator[tuple[float, str, Pod, str]]:
    """The values after ``first``, newest first: sorted only when asked for (``first`` did not verify)."""
    yield from sorted((h for h in heard if h is not first), key=_order)


def _order(heard: tuple[float, str, Pod, str]) -> tuple[float, str]:
    """Newest first, then by pod name."""
    return heard[0], heard[1]


class _Time(msgspec.Struct):
    at: str = ""


_time_decoder = msgspec.json.Decoder(_Time)


def record_time(raw: str) -> float | None:
    """A record's time (Unix seconds) read without its slots; None when the value is no record with a zoned time.

    kilter writes ``at`` before the slots (``encode``): there it is cut out of
    the text; anything else is decoded (msgspec passes over the slots). The
    time only orders the values: the one adopted is decoded and verified whole.
    """
    start = raw.find(_AT, 0, 512)
    end = raw.find('"', start + len(_AT), start + len(_AT) + 40) if start >= 0 else -1
    text = raw[start + len(_AT) : end] if end >= 0 else None
    try:
        at = datetime.datetime.fromisoformat(text if text is not None else _time_decoder.decode(raw).at)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
        return None
    return at.timestamp() if at.tzinfo is not None else None


_AT = '","at":"'


def _trusted(record: PlanRecord | None, keys: PlanKeys, uids: Iterable[str], where: str) -> PlanRecord | None:
    """``record`` if ``keys`` verify it for one of ``uids``; else None, with a log line."""
    if record is None:
        return None
    if verifies(record, keys, uids):
        return record
    how = "is not signed" if not record.sig else "has a signature no plan key verifies for this object"
    log.warning("%s: %s %s (not written by kilter); ignored", where, PLAN_ANNOTATION, how)
    return None

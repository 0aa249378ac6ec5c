"""``kilter.v1.Placement``: decode, ask ``gangs``/``state`` about the current state, encode.

Every handler runs on the server's event loop, the thread the HTTP verbs and
the state feed run on, so the state never changes under an answer; a Plan's
what-if undoes its bookings before it returns (``planning.plan_object``).
What needs the layers above (the extender's ``DecisionLog``, Volcano's
notes) is handed in as plain callables (``Sources``), so this layer imports
nothing above ``gangs``.

Errors leave as gRPC statuses, mapped here once: bad input is
INVALID_ARGUMENT naming the field (``job``, ``job.spec.replicas``,
``platform``, ``kind``...), a decision nobody recorded NOT_FOUND, a caller
outside the trusted networks (without a verified client certificate)
PERMISSION_DENIED. INTERNAL is left for kilter's own failures.

Inventory keeps its last answer and gives it again while nothing it was
taken from has changed (the state's version, the fleet's generation, every
node's used GPUs and usability): peer regions poll it, and the answer of an
unchanged state is the same message.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc

from kilter.api import messages
from kilter.api import placement_pb2 as pb
from kilter.api import placement_pb2_grpc as pb_grpc
from kilter.gangs import inventory, planning
from kilter.gangs.book import GangBook
from kilter.gangs.decisions import DecisionFeed
from kilter.gangs.expected_starts import plan_start
from kilter.gangs.identity import KINDS, GangKey, in_gang
from kilter.gangs.waits import Waits
from kilter.kube.api import check_name, check_namespace
from kilter.model.errors import InputError, KilterError, UnknownPlatform
from kilter.model.jobs import read_job
from kilter.state.snapshot import parse_documents
from kilter.state.store import ClusterStore
from kilter.topology.fleet import Fleet
from kilter.topology.split_wait import SplitWait

__all__ = ["GANG_KINDS", "MAX_JOB_BYTES", "PlacementServicer", "Sources"]

log = logging.getLogger("kilter.api")

MAX_JOB_BYTES = 4 * 1024 * 1024
"""Largest ``PlanRequest.job``: gRPC's default receive limit, and far above any job object etcd stores (1.5 MiB)."""

GANG_KINDS: Mapping[str, str] = {
    **{kind: kind for kind in KINDS},
    "jobset": "jobset",
    "pytorchjob": "kubeflow",
    "mpijob": "kubeflow",
    "tfjob": "kubeflow",
    "leaderworkerset": "lws",
}
"""``ExplainRequest.kind`` (lower-cased) -> the gang-key kind whose pods it names."""

Explain = Callable[[str, str], Sequence[Mapping[str, Any]] | None]  # (namespace, pod) -> rendered records


@dataclass(frozen=True)
class Sources:
    """What the servicer reads, handed in by whoever composes the servers.

    ``explain`` is the extender's ``DecisionLog.explain``; ``notes`` Volcano's reasons for a ``namespace/podgroup``
    (None where Volcano's verbs are not served); ``trusted`` says whether a gRPC peer (``context.peer()``) may call.
    """

    store: ClusterStore
    gangs: GangBook
    feed: DecisionFeed
    explain: Explain
    notes: Callable[[str], Mapping[str, str] | None] | None = None
    trusted: Callable[[str], bool] = lambda peer: True


async def _abort(context: grpc.aio.ServicerContext[Any, Any], code: grpc.StatusCode, message: str) -> NoReturn:
    await context.abort(code, message)
    raise AssertionError("abort returned")  # context.abort raises; this keeps the type checker honest


def _field(error: KilterError, base: str) -> str:
    """``error`` as one line naming the field: ``job.spec.replicas: must be >= 0``."""
    if isinstance(error, InputError):
        path = error.path
        field = base + path[1:] if path.startswith("$") else f"{base}.{path}"
        return f"{field}: {error.message}"
    return f"{base}: {error}"


class PlacementServicer(pb_grpc.PlacementServicer):
    def __init__(self, sources: Sources) -> None:
        self.sources = sources
        # The last Inventory answer and what it was taken from (see ``_usage_digest``): peers poll it, and at
        # 5,004 nodes taking it costs several ms while an unchanged state's answer is the same message.
        self._inventory: tuple[tuple[object, ...], pb.InventoryResponse] | None = None

    async def _check_peer(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        if not self.sources.trusted(context.peer()):
            message = (
                f"caller {context.peer()} is not trusted; kilter answers --trusted-networks and, with "
                "--grpc-client-ca, verified client certificates"
            )
            await _abort(context, grpc.StatusCode.PERMISSION_DENIED, message)

    # ------------------------------------------------------------------ Plan

    async def Plan(self, request: pb.PlanRequest, context: grpc.aio.ServicerContext[Any, Any]) -> pb.PlanResponse:
        started = time.perf_counter()
        await self._check_peer(context)
        store = self.sources.store
        try:
            obj = _job_object(request.job)
            job = read_job(obj)
        except InputError as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, _field(exc, "job"))
        platform = request.platform or None
        try:
            if platform is not None:
                store.catalog.get(platform)
        except UnknownPlatform as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"platform: {exc}")
        try:  # protobuf checks the Timestamp's range here, and says so with ValueError
            now_s = request.now.ToNanoseconds() / 1e9 if request.HasField("now") else time.time()
        except ValueError as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"now: {exc}")
        try:
            fleet = store.fleet()
            plan = planning.plan_object(fleet, obj, job, self._waits(now_s), now_s=now_s, platform=platform, keep=False)
            plan.update(self._start(obj, plan, now_s))
        except (InputError, UnknownPlatform) as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, _field(exc, "job"))
        answer = messages.plan_response(plan)
        _timing(context, started)
        return answer

    def _start(self, obj: Mapping[str, Any], plan: Mapping[str, Any], now_s: float) -> dict[str, Any]:
        """When the job would start (``expected_starts.plan_start``), as ``kilter plan`` reports it."""
        store, gangs = self.sources.store, self.sources.gangs
        starts = gangs.starts
        return plan_start(
            obj,
            store.fleet(),
            now_s=now_s,
            starts_now=bool(plan["feasible"]) and not plan["waiting"],
            starts=lambda: starts.recent(now_s),
            state=store.state(),
            learned=gangs.waits.learned if gangs.waits is not None else None,  # the server's, as ``Waits`` reads them
            settings=starts.settings() if starts.settings else None,
        )

    def _waits(self, now_s: float) -> Waits:
        """The server's own split-wait rule and learned runtimes, judged at ``now_s``."""
        waits = self.sources.gangs.waits
        if waits is None:
            return Waits.of_state(self.sources.store.state(), SplitWait(factor=0.0), now_s=now_s)
        return Waits(waits.settings, waits.learned, lambda: now_s)

    # ------------------------------------------------------------------ Explain

    async def Explain(
        self, request: pb.ExplainRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ExplainResponse:
        await self._check_peer(context)
        namespace, name, kind = request.namespace, request.name, request.kind.lower()
        try:
            check_namespace(namespace, what="namespace")
            if not name:
                raise InputError("name: required")
        except InputError as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"namespace: {exc}" if name else str(exc))
        if kind in ("", "pod"):
            try:
                check_name(name, what="name")
            except InputError as exc:
                await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"name: {exc}")
            records = self.sources.explain(namespace, name)
            if records is None:
                await _abort(context, grpc.StatusCode.NOT_FOUND, f"no decision recorded about pod {namespace}/{name}")
            pods = [messages.pod_decisions(namespace, name, records)]
            return pb.ExplainResponse(namespace=namespace, name=name, kind="pod", pods=pods)
        gang_kind = GANG_KINDS.get(kind)
        if gang_kind is None:
            known = ", ".join(sorted({"pod", *GANG_KINDS}))
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"kind: {request.kind!r} is not one of {known}")
        try:
            key = GangKey.parse(GangKey(namespace, gang_kind, tuple(name.split("/"))).format())
        except InputError as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"name: {exc}")
        return await self._explain_gang(key, context)

    async def _explain_gang(self, key: GangKey, context: grpc.aio.ServicerContext[Any, Any]) -> pb.ExplainResponse:
        """Every recorded pod of the gang (the state's pods of it, by the labels ``identify`` reads), its open
        plan, and Volcano's notes on a PodGroup."""
        pods = []
        for pod in sorted(in_gang(key).members(self.sources.store), key=lambda p: p.metadata.name):
            records = self.sources.explain(key.namespace, pod.metadata.name)
            if records is not None:
                pods.append(messages.pod_decisions(key.namespace, pod.metadata.name, records))
        plan = self.sources.gangs.plan_of(key.format())
        notes_of = self.sources.notes
        notes = dict(notes_of(f"{key.namespace}/{key.name}") or {}) if notes_of and key.kind == "podgroup" else {}
        if not pods and plan is None and not notes:
            await _abort(context, grpc.StatusCode.NOT_FOUND, f"no decision recorded about gang {key.format()}")
        return pb.ExplainResponse(
            namespace=key.namespace,
            name=key.name,
            kind=key.kind,
            pods=pods,
            plan=messages.gang_plan(plan) if plan is not None else None,
            notes=notes,
        )

    # ------------------------------------------------------------------ Inventory

    async def Inventory(
        self, request: pb.InventoryRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.InventoryResponse:
        started = time.perf_counter()
        await self._check_peer(context)
        store = self.sources.store
        fleet = store.fleet()
        key = (store.version, store.generation, _usage_digest(fleet), request.platform, request.block)
        if self._inventory is not None and self._inventory[0] == key:
            _timing(context, started)
            return self._inventory[1]
        try:
            taken = inventory.take(store, platform=request.platform or None, block=request.block or None)
        except UnknownPlatform as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"platform: {exc}")
        except InputError as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, _field(exc, "block"))
        answer = messages.inventory(taken)
        self._inventory = (key, answer)
        _timing(context, started)
        return answer

    # ------------------------------------------------------------------ WatchDecisions

    async def WatchDecisions(
        self, request: pb.WatchRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.WatchResponse]:
        await self._check_peer(context)
        if request.namespace:
            try:
                check_namespace(request.namespace)
            except InputError as exc:
                await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"namespace: {exc}")
        sub = self.sources.feed.subscribe(request.namespace)
        try:
            while True:
                yield messages.watch_response(await sub.next())
        finally:
            sub.close()


def _timing(context: grpc.aio.ServicerContext[Any, Any], started: float) -> None:
    """The answer's own time as trailing metadata, ``server-timing: dur=MS`` as the HTTP listener's header says it:
    what a client's round trip spent in kilter rather than in transport."""
    context.set_trailing_metadata((("server-timing", f"dur={(time.perf_counter() - started) * 1000:.3f}"),))


def _usage_digest(fleet: Fleet) -> bytes:
    """What an inventory reads of the fleet beyond the state's version and fleet generation: each node's used GPUs
    (bound, assumed and reserved alike) and whether it is usable. Equal digests, versions and generations mean an
    equal inventory, so the last answer may be given again."""
    bm = fleet.bitmap
    digest = hashlib.blake2b(bm.node_used_gpus.tobytes(), digest_size=16)
    digest.update(bm.node_usable_flags.tobytes())
    return digest.digest()


def _job_object(raw: bytes) -> dict[str, Any]:
    """The one job object ``raw`` holds (YAML or JSON); InputError (path ``$``) otherwise."""
    if len(raw) > MAX_JOB_BYTES:
        raise InputError(f"{len(raw)} bytes; the limit is {MAX_JOB_BYTES}")
    if not raw.strip():
        raise InputError("empty: give one job object, YAML or JSON")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text") from None
    docs = parse_documents(text, source="the job")
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise InputError(f"must hold exactly one job object, found {len(docs)} documents")
    return docs[0]

"""The HTTP listener of ``kilter serve``: a bare ASGI app, run by uvicorn with httptools and uvloop.

No framework sits between the socket and the verbs: measured on a machine
like the CI's, uvicorn + httptools came first for small
bodies and level with the rest once a handler does real work, and a router
would add a per-request cost for four fixed paths. Bodies above
their path's limit (``max_body_bytes`` for ``/scheduler/*``, ``volcano_max_body_bytes`` for
``/volcano/*``) are refused with 413 before they are read whole; every
verb runs on the event-loop thread, which also applies state events, so the
state never changes under a decision. A failure no verb foresaw is logged,
counted (``kilter_internal_errors_total``) and answered in the protocol by the
one map in ``last_resort``: never a 5xx, never a dead server, never an allow.
The verbs and /debug answer trusted callers only (``trusted``, by default
loopback: kube-scheduler calls its sidecar on 127.0.0.1); anyone else gets a
403 before the body is read, counted in ``kilter_untrusted_requests_total``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from kilter.extenders import last_resort
from kilter.extenders.binder import Binder
from kilter.extenders.readings import GangReading, SpareReading, VolcanoReading
from kilter.extenders.scheduler import SchedulerExtender, VerbAnswer
from kilter.extenders.volcano import VOLCANO_VERBS, VolcanoExtender
from kilter.extenders.wire import BindingArgs
from kilter.gangs import GangBook
from kilter.gangs.decisions import Decision
from kilter.gangs.expected_starts import ExpectedStarts
from kilter.gangs.start_watch import StartWatch
from kilter.model import asgi
from kilter.model.asgi import BodyRefused, Receive, Scope, Send
from kilter.model.errors import KilterError
from kilter.state.store import ClusterStore
from kilter.topology.fleet import Fleet

__all__ = ["DEFAULT_MAX_BODY_BYTES", "DEFAULT_VOLCANO_BODY_BYTES", "App", "Metrics"]

log = logging.getLogger("kilter.serve")

# /scheduler/*: kube-scheduler with nodeCacheCapable (kilter's manifests) sends node names, ~20 bytes a node
# (~100 KB at 5,000 nodes), beside one Pod (etcd holds at most ~1.5 MiB) or a preemption's victim UIDs. 8 MiB
# is 5x that worst case; the slowest 8 MiB body measured (every one of ~700,000 unknown names failed) holds
# the event loop ~0.75 s. Full-Node mode (nodeCacheCapable: false, 16-50 KB a Node) needs --max-body-bytes.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
# /volcano/*: onSessionOpen carries the whole session, ~110 MB at 5,004 nodes (bench/results/volcano.json);
# 256 MiB leaves room for ~11,000 such nodes.
DEFAULT_VOLCANO_BODY_BYTES = 256 * 1024 * 1024
VERBS = ("filter", "prioritize", "preempt", "bind")
TRUSTED_PREFIXES = ("/scheduler/", "/volcano/", "/debug/")
"""Paths only trusted callers reach (``App.trusted``); /healthz, /readyz and /metrics are for probes and Prometheus."""
LEGACY_PREFIX = "v1.9/"  # /volcano/v1.9/<verb>: Volcano up to v1.9, whose predicate answer was a list
KNOWN_PATHS = {
    *(f"/scheduler/{v}" for v in VERBS),
    *(f"/volcano/{v}" for v in VOLCANO_VERBS),
    *(f"/volcano/{LEGACY_PREFIX}{v}" for v in VOLCANO_VERBS),
    "/healthz",
    "/readyz",
    "/metrics",
    "/debug/explain",
    "/debug/volcano",
    "/debug/views",
}
START_ERROR_BUCKETS = (-86400.0, -14400.0, -3600.0, -600.0, -60.0, 0.0, 60.0, 600.0, 3600.0, 14400.0, 86400.0)
VIEWS_MAX_BODY_BYTES = 2 * 1024 * 1024  # a kubectl-kilter view's request: its command line and, for plan, a manifest
Views = Callable[[bytes], tuple[int, bytes]]
"""``POST /debug/views``: the kubectl plugin's request in, (status, JSON answer or one line) out; the cli layer's."""


class Metrics:
    """Prometheus series of one server (own registry, so several servers can live in one process)."""

    def __init__(self, gangs: GangBook, *, volcano: VolcanoExtender | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(SpareReading(gangs.store))
        if volcano is not None:
            self.registry.register(VolcanoReading(volcano))
        self.requests = Counter(
            "kilter_extender_requests",
            "HTTP requests by path and status code",
            ["path", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "kilter_extender_request_duration_seconds",
            "Time from the whole body read to the answer encoded, by verb",
            ["verb"],
            buckets=(0.0002, 0.0005, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0),
            registry=self.registry,
        )
        self.decisions = Counter(
            "kilter_extender_decisions", "Answers by verb and outcome", ["verb", "outcome"], registry=self.registry
        )
        self.untrusted = Counter(
            "kilter_untrusted_requests",
            "Requests refused with 403: the caller is not trusted (--trusted-networks, --http-client-ca), by path",
            ["path"],
            registry=self.registry,
        )
        self.internal_errors = Counter(
            "kilter_internal_errors",
            "Requests a failure no handler foresaw answered (in the protocol's error field or a 4xx), by path",
            ["path"],
            registry=self.registry,
        )
        self.grpc_refused = Counter(
            "kilter_grpc_refused",
            "gRPC requests refused before any handler ran, by method and status code: not a valid message "
            "(INVALID_ARGUMENT), or not one from a trusted caller (PERMISSION_DENIED)",
            ["method", "code"],
            registry=self.registry,
        )
        plans = Gauge("kilter_gang_plans_open", "Gang plans holding reserved GPUs", registry=self.registry)
        plans.set_function(gangs.open_count)
        self.registry.register(GangReading(gangs))
        waits = gangs.waits
        waiting = Gauge(
            "kilter_gangs_waiting_for_domains",
            "Preferred gangs holding off now for room in fewer scale-up domains (kilter.dev/split-wait)",
            registry=self.registry,
        )
        waiting.set_function(lambda: waits.waiting() if waits is not None else 0)
        store = gangs.store
        self.start_error = Histogram(
            "kilter_start_error_seconds",
            "Promised gangs found running: their start less the first start kubectl kilter pending promised them "
            "(late above 0)",
            buckets=START_ERROR_BUCKETS,
            registry=self.registry,
        )
        self.backfilled = Counter(
            "kilter_jobs_backfilled",
            "Gangs found running in a domain reserved from a later moment for a gang ahead of them in the queue",
            registry=self.registry,
        )
        watch = StartWatch()

        def observe(found: ExpectedStarts, fleet: Fleet) -> None:
            seen = watch.observe(found, fleet)
            for error in seen.errors:
                self.start_error.observe(error)
            self.backfilled.inc(seen.backfilled)

        starts = gangs.starts
        starts.observe = observe
        held = Gauge(
            "kilter_reservations_held",
            "Pending gangs with a reservation: an expected start on domains kept for them (kubectl kilter pending)",
            registry=self.registry,
        )
        held.set_function(starts.held)
        reload_ok = Gauge(
            "kilter_state_reload_ok",
            "1 when the last reload of the state's source succeeded, 0 while kilter serves an older state",
            registry=self.registry,
        )
        reload_ok.set_function(lambda: 0 if store.feed_error else 1)
        unreadable = Gauge(
            "kilter_state_objects_unreadable",
            "Objects of the state's source left out because kilter cannot read them",
            registry=self.registry,
        )
        unreadable.set_function(lambda: len(store.unreadable()))


class App:
    def __init__(
        self,
        store: ClusterStore,
        extender: SchedulerExtender,
        binder: Binder,
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        volcano_max_body_bytes: int = DEFAULT_VOLCANO_BODY_BYTES,
        startup: list[Callable[[], Awaitable[None]]] | None = None,
        volcano: VolcanoExtender | None = None,
        sync_status: Callable[[], dict[str, dict[str, object]]] | None = None,
        shutdown: list[Callable[[], None]] | None = None,
        trusted: Callable[[Scope], bool] = asgi.is_local_caller,
        views: Views | None = None,
    ) -> None:
        self.store = store
        self.views = views
        self.trusted = trusted
        self.volcano = volcano
        self.sync_status = sync_status
        self.shutdown = shutdown or []
        self.is_writer: Callable[[], bool] = lambda: True  # the leader, with --leader-elect
        self.extender = extender
        self.binder = binder
        self.max_body_bytes = max_body_bytes
        self.volcano_max_body_bytes = volcano_max_body_bytes
        self.metrics = Metrics(extender.gangs, volcano=volcano)
        self.startup = startup or []
        # What else /readyz lists as wrong (a --config file not in force): each a callable giving its lines.
        self.problem_sources: list[Callable[[], list[str]]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        method: str = scope["method"]
        if path.startswith(TRUSTED_PREFIXES) and not self.trusted(scope):
            await self._untrusted(scope, send)
            return
        try:
            if path.startswith("/scheduler/"):
                verb = path[len("/scheduler/") :]
                if verb not in VERBS:
                    await self._reply(send, path, 404, b"unknown extender verb\n", "text/plain")
                elif method != "POST":
                    await self._reply(send, path, 405, b"POST only\n", "text/plain")
                else:
                    await self._verb(scope, receive, send, verb)
            elif path.startswith("/volcano/"):
                verb = path[len("/volcano/") :]
                legacy = verb.startswith(LEGACY_PREFIX)
                verb = verb.removeprefix(LEGACY_PREFIX)
                if self.volcano is None:
                    await self._reply(send, path, 404, b"the Volcano verbs are not served here\n", "text/plain")
                elif verb not in VOLCANO_VERBS:
                    await self._reply(send, path, 404, _unknown_volcano_verb(verb), "text/plain")
                elif method != "POST":
                    await self._reply(send, path, 405, b"POST only\n", "text/plain")
                else:
                    await self._verb(scope, receive, send, verb, volcano="legacy" if legacy else "current")
            elif path == "/debug/views" and self.views is not None:
                if method != "POST":
                    await self._reply(send, path, 405, b"POST only\n", "text/plain")
                else:
                    await self._views(scope, receive, send)
            elif method != "GET":
                await self._reply(send, path, 405, b"GET only\n", "text/plain")
            elif path == "/healthz":
                await self._reply(send, path, 200, b"ok\n", "text/plain")
            elif path == "/readyz":
                await self._readyz(send, path)
            elif path == "/metrics":
                await self._reply(send, path, 200, generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST)
            elif path == "/debug/explain":
                await self._explain(scope, send)
            elif path == "/debug/volcano" and self.volcano is not None:
                await self._volcano_notes(scope, send)
            else:
                await self._reply(send, path, 404, b"not found\n", "text/plain")
        except Exception as exc:  # a bug must cost one request, not the server; answered in-protocol, never a 5xx
            log.exception("request to %s failed", path)
            known = path if path in KNOWN_PATHS else "other"
            self.metrics.internal_errors.labels(known).inc()
            answer = last_resort.internal_error(known, last_resort.one_line(exc))
            content_type = "application/json" if answer.status == 200 else "text/plain"
            await self._reply(send, path, answer.status, answer.body, content_type)

    async def _readyz(self, send: Send, path: str) -> None:
        """200 once the state is loaded (every resource listed once, when live); with a live feed, per resource.

        What is wrong with a loaded state (``ClusterStore.problems``: a reload
        that failed, objects left out, inactive ClusterQueues; and
        ``SplitWaits.problems``: split-wait annotations kilter ignores; a ``--config``
        file that cannot be read or was refused) is listed in the
        body, one line each after "ok" (``problems`` in the live JSON), but
        keeps the answer 200. Readiness decides whether the Service sends
        kube-scheduler and Volcano to this replica at all: a replica holding
        the last good state answers correctly as of that state, and taking it
        out of the endpoints would fail every extender call (or, where the
        extender is ``ignorable``, schedule without kilter), which is worse.
        Alert on ``kilter_state_reload_ok == 0`` instead.
        """
        ready = self.store.ready
        code = 200 if ready else 503
        waits = self.extender.gangs.waits
        problems = [*self.store.problems(), *(waits.problems() if waits is not None else ())] if ready else []
        problems += [line for source in self.problem_sources for line in source()]
        if self.sync_status is None:
            text = "\n".join(["ok", *problems]) if ready else "state not loaded"
            await self._reply(send, path, code, f"{text}\n".encode(), "text/plain")
            return
        doc = {"ready": ready, "resources": self.sync_status(), "problems": problems}
        await self._reply(send, path, code, json.dumps(doc, sort_keys=True).encode(), "application/json")

    async def _verb(self, scope: Scope, receive: Receive, send: Send, verb: str, *, volcano: str = "") -> None:
        path = scope["path"]
        # A prioritize body's node names are read piece by piece as it arrives (the last piece once the
        # clock runs), so that only its tail is left once it is whole, and the pieces need no joining.
        reader = None
        if volcano and verb == "prioritize" and self.volcano is not None:
            reader = self.volcano.prioritize_reader()
        limit = self.volcano_max_body_bytes if volcano else self.max_body_bytes
        chunks = await asgi.read_body(
            scope, receive, limit_bytes=limit, feed=reader.feed if reader is not None else None
        )
        if chunks is BodyRefused.TOO_LARGE:
            await self._too_large(send, path, limit, "--volcano-max-body-bytes" if volcano else "--max-body-bytes")
            return
        if isinstance(chunks, BodyRefused):
            return  # the client went away: nobody to answer
        started = time.perf_counter()
        answer = None
        if reader is not None:
            assert self.volcano is not None
            reader.feed(chunks[-1])
            answer = self.volcano.prioritize_streamed(reader.finish())
        if answer is None:
            joining = time.perf_counter()
            body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            started += time.perf_counter() - joining  # joining the pieces is reading the body, not answering
            if volcano:
                assert self.volcano is not None
                answer = self.volcano.call(verb, body, legacy=volcano == "legacy")
            else:
                answer = await self._bind(body) if verb == "bind" else self._answer(verb, body)
        elapsed = time.perf_counter() - started
        self.metrics.latency.labels(verb).observe(elapsed)
        self.metrics.decisions.labels(verb, answer.outcome).inc()
        content_type = "application/json" if answer.status == 200 else "text/plain"
        await self._reply(send, path, answer.status, answer.body, content_type, timing=elapsed)

    def _answer(self, verb: str, body: bytes) -> VerbAnswer:
        if verb == "filter":
            return self.extender.filter(body)
        if verb == "prioritize":
            return self.extender.prioritize(body)
        return self.extender.preempt(body)

    async def _bind(self, body: bytes) -> VerbAnswer:
        """Decide on the loop, call the API server on a worker thread, record on the loop again (and tell the
        decision feed, for a pod whose names passed the checks)."""
        request = self.extender.bind_request(body)
        if isinstance(request, VerbAnswer):
            return request
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(
                None, self.binder.bind, request.pod_namespace, request.pod_name, request.pod_uid, request.node
            )
        except KilterError as exc:
            self._tell_bind(request, "error", f"binding failed: {exc}")
            return self.extender.bind_failed(f"binding failed: {exc}")
        self._tell_bind(request, "bound", f"bound to {request.node}")
        return self.extender.bound(request)

    def _tell_bind(self, request: BindingArgs, outcome: str, message: str) -> None:
        feed = self.extender.log.feed
        if feed is not None and feed.watched:
            ns, name = request.pod_namespace, request.pod_name
            feed.publish(Decision(time.time(), "scheduler", "bind", "pod", ns, name, outcome, message, request.node))

    async def _explain(self, scope: Scope, send: Send) -> None:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        namespace = (query.get("namespace") or [""])[0]
        pod = (query.get("pod") or [""])[0]
        if not namespace or not pod:
            await self._reply(send, scope["path"], 400, b"namespace and pod are required\n", "text/plain")
            return
        records = self.extender.log.explain(namespace, pod)
        if records is None:
            body = json.dumps({"namespace": namespace, "pod": pod, "error": "no decision about this pod"}).encode()
            await self._reply(send, scope["path"], 404, body, "application/json")
            return
        body = json.dumps({"namespace": namespace, "pod": pod, "decisions": records}).encode()
        await self._reply(send, scope["path"], 200, body, "application/json")

    async def _views(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A ``kubectl kilter`` view answered from this replica's state (``cli.kubectl.served``)."""
        assert self.views is not None
        chunks = await asgi.read_body(scope, receive, limit_bytes=VIEWS_MAX_BODY_BYTES)
        if chunks is BodyRefused.TOO_LARGE:
            await self._too_large(send, scope["path"], VIEWS_MAX_BODY_BYTES)
            return
        if isinstance(chunks, BodyRefused):
            return
        status, body = self.views(b"".join(chunks))
        content_type = "application/json" if status == 200 else "text/plain"
        await self._reply(send, scope["path"], status, body, content_type)

    async def _volcano_notes(self, scope: Scope, send: Send) -> None:
        """What kilter last decided about a Volcano job (``?job=namespace/podgroup``) or queue (``?queue=``)."""
        assert self.volcano is not None
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        job = (query.get("job") or [""])[0]
        queue = (query.get("queue") or [""])[0]
        if bool(job) == bool(queue):
            message = b"give one of job=namespace/podgroup or queue=name\n"
            await self._reply(send, scope["path"], 400, message, "text/plain")
            return
        notes = self.volcano.notes.get(job or f"queue/{queue}")
        head: dict[str, Any] = {"job": job} if job else {"queue": queue}
        if queue:
            head["clusterQueue"] = self.volcano.view().cluster_queue(queue)
        if notes is None:
            doc, status = {**head, "error": "no decision about this yet"}, 404
        else:
            doc, status = {**head, "decisions": notes}, 200
        await self._reply(send, scope["path"], status, json.dumps(doc).encode(), "application/json")

    async def _untrusted(self, scope: Scope, send: Send) -> None:
        """403 and one line, before any byte of the body is read; the connection closes with it."""
        path = scope["path"]
        known = path if path in KNOWN_PATHS else "other"
        self.metrics.untrusted.labels(known).inc()
        peer = asgi.peer_address(scope)
        message = (
            f"{path}: caller {peer or 'unknown'} is not trusted; kilter answers loopback callers, "
            "--trusted-networks and, with --http-client-ca, verified client certificates\n"
        )
        await self._reply(send, path, 403, message.encode(), "text/plain", close=True)

    async def _too_large(self, send: Send, path: str, limit: int, flag: str = "") -> None:
        """413, naming the flag that sets ``limit`` where one does."""
        message = f"request body above the limit of {limit} bytes{f' ({flag})' if flag else ''}\n".encode()
        await self._reply(send, path, 413, message, "text/plain", close=True)

    async def _reply(
        self,
        send: Send,
        path: str,
        status: int,
        body: bytes,
        content_type: str,
        *,
        timing: float | None = None,
        close: bool = False,
    ) -> None:
        self.metrics.requests.labels(path if path in KNOWN_PATHS else "other", str(status)).inc()
        await asgi.reply(send, status, body=body, content_type=content_type, timing_s=timing, close=close)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    for hook in self.startup:
                        await hook()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for stop in self.shutdown:
                    stop()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _unknown_volcano_verb(verb: str) -> bytes:
    lowered = {v.lower(): v for v in VOLCANO_VERBS}
    hint = f" (Volcano's verb is {lowered[verb.lower()]})" if verb.lower() in lowered else ""
    return f"unknown Volcano extender verb {verb!r}{hint}; kilter serves {', '.join(VOLCANO_VERBS)}\n".encode()

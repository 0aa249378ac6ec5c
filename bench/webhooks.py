"""The admission webhooks under load: ``kilter serve``'s HTTPS listener run for real, over TLS, on a 5,004-node fleet.

Target (issue #5): p99 <= 5 ms at 500 AdmissionReviews/s over TLS. The
server (uvicorn + httptools + uvloop, ``lifespan="off"``, the context of
``ReloadingTLS`` as ``kilter serve`` sets it) lives in its own process over a
snapshot file: the GB200 fleet of bench/extender.py plus a ClusterQueue with
``kilter.dev/topology-policy: auto`` and a LocalQueue ``ml/team`` leading to
it. The client posts AdmissionReview v1 bodies as kube-apiserver writes them
(a fresh uid each): /validate of a batch/v1 Job of 8 pods x 4 GPUs that asks
for one NVLink domain (planned on the idle fleet, then checked against the
queue's quota), and /mutate of the same job with ``kilter.dev/topology: auto``
instead (planned, then patched). Like kube-apiserver's connection pool, the
load comes over a few keep-alive connections, each sending on a fixed
schedule (open loop): latency runs from the *scheduled* send time to the last
byte read, so a request that waits behind a slow one counts its wait
(coordinated-omission safe). The target is judged on all 15,000 reviews sent
at 500/s (half-and-half, validate only, mutate only: 10 s each); each run's
p99 is kept too. A run during which the hypervisor stole more than 2% of the
CPU is repeated (up to three runs), and the runs set aside are listed. The
bench wraps the app to add a ``server-timing`` header (the app's own time,
as the extender's app reports it) so the answer's time splits into the app
and the rest (TLS, HTTP, event loop, kernel, client).
Also measured: one connection, one request at a time; a fresh TLS connection
per request; the same load above the target; the review called in-process
(and profiled when the target is missed). The machine's steal time and CPU
pressure are recorded per run: on a small shared VM they move the p99 more
than the load does.
"""

from __future__ import annotations

import base64
import cProfile
import gc
import http.client
import json
import os
import pstats
import random
import ssl
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import cycle
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import uvicorn

from bench.common import host_counters, host_share, machine_speed, measure, process_cpu_s, write
from bench.extender import FLEET, GPU, RACKS, fleet_objects
from bench.server import run_on_ephemeral_port, serve_config, server_process
from kilter.cli.serve import build_app, webhook_app
from kilter.model.annotations import TOPOLOGY, TOPOLOGY_POLICY
from kilter.model.asgi import Message, Receive, Send
from kilter.state.feed import settle
from kilter.topology import fleetgen
from kilter.webhooks.server import WebhookApp
from kilter.webhooks.tls import ReloadingTLS
from tests.extenders.conftest import make_certificates

RATE = 500  # AdmissionReviews per second, the target's load
LOAD_S = 10.0
CONNECTIONS = 6  # kube-apiserver's pool to one webhook service: a handful of keep-alive connections
CONNECTION_WARMUP = 20
HEADROOM = ((1000, 5.0), (1500, 5.0))  # (rate, seconds): the same mixed load above the target
CLOSED_RUNS, CLOSED_WARMUP = 1000, 50
FRESH_RUNS = 100
IN_PROCESS_RUNS, IN_PROCESS_WARMUP = 2000, 50
PROFILE_RUNS = 2000
PACED_RUNS, IDLE_S = 1000, 0.001
DISTINCT_JOBS = 256
PODS, GPUS_PER_POD = 8, 4
NAMESPACE, LOCAL_QUEUE, CLUSTER_QUEUE, FLAVOR = "ml", "team", "gb200-training", "gb200"
CLIQUE = "nvidia.com/gpu.clique"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
QUEUE_NAME = "kueue.x-k8s.io/queue-name"
USER = "alice@example.com"
PLACEHOLDER = "00000000-0000-4000-8000-00000000feed"
# What kube-apiserver's webhook client sends (Go adds Accept-Encoding itself); it appends ?timeout= to the URL.
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, */*",
    "User-Agent": "kube-apiserver-admission",
    "Accept-Encoding": "gzip",
}
TIMEOUT_QUERY = "?timeout=10s"
TARGETS_MS = {"open_loop_500_per_s_p99": 5.0}
QUIET_STEAL, ATTEMPTS = 0.02, 3  # a load run with more steal than this is repeated, up to ATTEMPTS runs in all


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


# ---------------------------------------------------------------------------------------------- objects


def kueue_objects() -> list[dict[str, Any]]:
    """The flavor, a ClusterQueue that opts its jobs into topology-aware placement, and the team's LocalQueue."""
    trays = 18 * sum(p.domains for p in FLEET.pools)  # quota for the whole fleet: 144 CPUs, 884Gi, 4 GPUs a tray
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": FLAVOR},
        "spec": {
            "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-GB200"},
            "topologyName": "gpu-fabric",
            "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
        },
    }
    cluster_queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": CLUSTER_QUEUE, "annotations": {TOPOLOGY_POLICY: "auto"}},
        "spec": {
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", GPU],
                    "flavors": [
                        {
                            "name": FLAVOR,
                            "resources": [
                                {"name": "cpu", "nominalQuota": str(144 * trays)},
                                {"name": "memory", "nominalQuota": f"{884 * trays}Gi"},
                                {"name": GPU, "nominalQuota": str(4 * trays)},
                            ],
                        }
                    ],
                }
            ],
        },
    }
    local_queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": LOCAL_QUEUE, "namespace": NAMESPACE},
        "spec": {"clusterQueue": CLUSTER_QUEUE},
    }
    return [flavor, cluster_queue, local_queue]


def write_snapshot(path: Path, items: Sequence[dict[str, Any]]) -> None:
    path.write_bytes(_dumps({"apiVersion": "v1", "kind": "List", "items": list(items)}))


def _fields(value: Any) -> dict[str, Any]:
    """A FieldsV1 set of what ``value`` sets (maps by key, lists of named items by name), as managedFields hold it."""
    if isinstance(value, dict):
        out: dict[str, Any] = {".": {}} if value else {}
        out.update({f"f:{k}": _fields(v) for k, v in value.items()})
        return out
    if isinstance(value, list) and value and all(isinstance(v, dict) and "name" in v for v in value):
        return {f'k:{{"name":"{v["name"]}"}}': _fields(v) for v in value}
    return {}


def job_manifest(i: int, *, mutate: bool) -> dict[str, Any]:
    """The 8 x 4-GPU training Job a user applies: TAS annotation on the template, or ``kilter.dev/topology: auto``."""
    name = f"llama-pretrain-{i:04d}"
    gpu = str(GPUS_PER_POD)
    resources = {"cpu": "64", "memory": "800Gi", GPU: gpu}
    template_meta: dict[str, Any] = {"labels": {"app.kubernetes.io/name": "llama-pretrain", "team": "ml"}}
    if not mutate:
        template_meta["annotations"] = {REQUIRED: CLIQUE}
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": NAMESPACE,
        "labels": {QUEUE_NAME: LOCAL_QUEUE, "app.kubernetes.io/name": "llama-pretrain", "team": "ml"},
    }
    if mutate:
        metadata["annotations"] = {TOPOLOGY: "auto"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "parallelism": PODS,
            "completions": PODS,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "suspend": True,
            "template": {
                "metadata": template_meta,
                "spec": {
                    "restartPolicy": "Never",
                    "subdomain": name,
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "nvcr.io/nvidia/nemo:25.07",
                            "command": ["torchrun"],
                            "args": [
                                f"--nnodes={PODS}",
                                f"--nproc-per-node={gpu}",
                                "--rdzv-backend=c10d",
                                f"--rdzv-endpoint={name}-0.{name}:29500",
                                "/opt/train/pretrain.py",
                                "--config=/etc/train/llama-70b.yaml",
                            ],
                            "env": [
                                {"name": "NCCL_DEBUG", "value": "WARN"},
                                {"name": "NCCL_MNNVL_ENABLE", "value": "1"},
                                {"name": "NCCL_CUMEM_ENABLE", "value": "1"},
                                {"name": "WANDB_PROJECT", "value": "llama-pretrain"},
                            ],
                            "ports": [{"name": "rdzv", "containerPort": 29500}],
                            "resources": {"limits": dict(resources), "requests": dict(resources)},
                            "volumeMounts": [
                                {"name": "dshm", "mountPath": "/dev/shm"},
                                {"name": "data", "mountPath": "/data", "readOnly": True},
                                {"name": "config", "mountPath": "/etc/train"},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Gi"}},
                        {"name": "data", "persistentVolumeClaim": {"claimName": "pretrain-corpus"}},
                        {"name": "config", "configMap": {"name": "llama-70b-config"}},
                    ],
                    "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
                },
            },
        },
    }


def job_object(i: int, rng: random.Random, *, mutate: bool) -> dict[str, Any]:
    """The Job as an admission webhook receives it: defaulted, with kubectl's annotation and managedFields.

    Mutating webhooks run before the registry's BeforeCreate, so the object
    they see has no uid, creationTimestamp or generated selector yet; the
    validating ones run after it and see all three.
    """
    manifest = job_manifest(i, mutate=mutate)
    job: dict[str, Any] = json.loads(json.dumps(manifest))
    meta, spec = job["metadata"], job["spec"]
    meta.setdefault("annotations", {})["kubectl.kubernetes.io/last-applied-configuration"] = (
        json.dumps(manifest, separators=(",", ":")) + "\n"
    )
    meta["creationTimestamp"] = None
    meta["managedFields"] = [
        {
            "manager": "kubectl-client-side-apply",
            "operation": "Update",
            "apiVersion": "batch/v1",
            "time": "2025-12-01T09:30:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": _fields(manifest["metadata"]), "f:spec": _fields(manifest["spec"])},
        }
    ]
    # batch/v1 and core/v1 defaulting
    spec["podReplacementPolicy"] = "TerminatingOrFailed"
    spec["manualSelector"] = None
    template = spec["template"]
    template["metadata"]["creationTimestamp"] = None
    pod = template["spec"]
    pod.update(
        {
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "securityContext": {},
            "schedulerName": "default-scheduler",
        }
    )
    for c in pod["containers"]:
        c.update(
            {
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }
        )
        for port in c["ports"]:
            port["protocol"] = "TCP"
    pod["volumes"][2]["configMap"]["defaultMode"] = 420
    if not mutate:  # the registry's BeforeCreate: uid, timestamps, generation, the generated selector and labels
        uid = _uid(rng)
        meta.update({"uid": uid, "creationTimestamp": "2025-12-01T09:30:00Z", "generation": 1})
        controller = {"batch.kubernetes.io/controller-uid": uid, "controller-uid": uid}
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        template["metadata"]["labels"].update(
            {**controller, "batch.kubernetes.io/job-name": meta["name"], "job-name": meta["name"]}
        )
    return job


def admission_review(obj: dict[str, Any], uid: str) -> dict[str, Any]:
    """A CREATE review as kube-apiserver writes it: every field of AdmissionRequest, null where unset."""
    gvk = {"group": "batch", "version": "v1", "kind": "Job"}
    gvr = {"group": "batch", "version": "v1", "resource": "jobs"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": obj["metadata"]["name"],
            "namespace": NAMESPACE,
            "operation": "CREATE",
            "userInfo": {
                "username": USER,
                "uid": "6e1b2c8a-94a1-4c35-9b0f-3f1f3b8d2a10",
                "groups": ["ml-researchers", "system:authenticated"],
                "extra": {"authentication.kubernetes.io/credential-id": ["JTI=7c9e6679-7425-40de-944b-e07fc1f90ae7"]},
            },
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {
                "kind": "CreateOptions",
                "apiVersion": "meta.k8s.io/v1",
                "fieldManager": "kubectl-client-side-apply",
            },
        },
    }


@dataclass(frozen=True)
class Review:
    """One AdmissionReview body, split where its request uid goes (each request carries a fresh one)."""

    mutating: bool
    head: bytes
    tail: bytes

    @property
    def path(self) -> str:
        return "/mutate" if self.mutating else "/validate"

    def body(self, uid: str) -> bytes:
        return self.head + uid.encode() + self.tail

    @classmethod
    def of(cls, obj: dict[str, Any], *, mutating: bool) -> Review:
        head, sep, tail = _dumps(admission_review(obj, PLACEHOLDER)).partition(PLACEHOLDER.encode())
        assert sep and PLACEHOLDER.encode() not in tail
        return cls(mutating, head, tail)


def reviews(rng: random.Random, *, mutating: bool) -> list[Review]:
    return [Review.of(job_object(i, rng, mutate=mutating), mutating=mutating) for i in range(DISTINCT_JOBS)]


# ---------------------------------------------------------------------------------------------- server


class ServerTiming:
    """The webhook app with a ``server-timing: app;dur=<ms>`` answer header: ASGI call (body read) to answer encoded.

    The extender's app writes this header itself; the webhook app does not,
    so the bench wraps it (a few microseconds) to tell the app's time from
    the time in TLS, HTTP, the event loop, the kernel and the client.
    """

    def __init__(self, app: WebhookApp) -> None:
        self.app = app

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        t0 = time.perf_counter()

        async def timed(message: Message) -> None:
            if message["type"] == "http.response.start":
                timing = f"app;dur={(time.perf_counter() - t0) * 1000:.3f}".encode()
                message = {**message, "headers": [*message["headers"], (b"server-timing", timing)]}
            await send(message)

        await self.app(scope, receive, timed)


def _serve(snapshot: str, cert: str, key: str, port_out: Connection) -> None:
    """Child process: load the snapshot, start the webhook listener as ``kilter serve`` does, on an ephemeral port."""
    tls = ReloadingTLS(Path(cert), Path(key))
    _, store = build_app(serve_config(Path(snapshot)))
    settle()  # as `kilter serve` does once the state is loaded
    app = ServerTiming(webhook_app(store, []))
    config = uvicorn.Config(app, loop="uvloop", http="httptools", lifespan="off", access_log=False, log_level="warning")
    config.load()
    config.ssl = tls.context
    run_on_ephemeral_port(config, port_out)


@dataclass(frozen=True)
class Served:
    port: int
    pid: int
    ready_s: float
    client: ssl.SSLContext


@contextmanager
def serving(snapshot: Path, cert: Path, key: Path, ca: Path) -> Iterator[Served]:
    """The webhook listener in its own process over ``snapshot``, ready; stopped (SIGTERM) on exit."""
    client = ssl.create_default_context(cafile=str(ca))
    with server_process(_serve, (str(snapshot), str(cert), str(key)), tls=client) as (port, pid, ready_s):
        yield Served(port, pid, ready_s, client)


# ---------------------------------------------------------------------------------------------- client


class Client:
    """One keep-alive HTTPS connection to the webhook listener, as one of kube-apiserver's pooled connections."""

    def __init__(self, served: Served) -> None:
        self.served = served
        self.conn = self._connect()

    def _connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.served.port, context=self.served.client, timeout=10)

    def post(self, review: Review, uid: str) -> tuple[int, bytes, float]:
        """(HTTP status, answer, the app's ms from ``server-timing``)."""
        self.conn.request("POST", review.path + TIMEOUT_QUERY, review.body(uid), HEADERS)
        resp = self.conn.getresponse()
        data = resp.read()
        timing = resp.getheader("server-timing") or "dur=nan"
        return resp.status, data, float(timing.partition("dur=")[2])

    def reconnect(self) -> None:
        self.conn.close()
        self.conn = self._connect()

    def tls(self) -> dict[str, Any]:
        sock = self.conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        cipher = sock.cipher()
        return {"version": sock.version(), "cipher": cipher[0] if cipher else None}

    def close(self) -> None:
        self.conn.close()


def problem(review: Review, uid: str, status: int, data: bytes) -> str:
    """Why an answer is not the one kube-apiserver should get ("" when it is)."""
    if status != 200:
        return f"HTTP {status}: {data[:200]!r}"
    answer = msgspec.json.decode(data)
    response = answer.get("response") or {}
    if answer.get("apiVersion") != "admission.k8s.io/v1" or answer.get("kind") != "AdmissionReview":
        return f"not an admission.k8s.io/v1 AdmissionReview: {data[:200]!r}"
    if response.get("uid") != uid:
        return f"answered uid {response.get('uid')!r}, asked {uid!r}"
    if response.get("allowed") is not True:
        return f"denied: {response.get('status')}"
    if review.mutating and (response.get("patchType") != "JSONPatch" or not response.get("patch")):
        return f"no JSONPatch in the mutating answer: {data[:200]!r}"
    if not review.mutating and ("patch" in response or "patchType" in response):
        return "a validating answer carries a patch"
    return ""


def first_answers(served: Served, validate: Review, mutate: Review, rng: random.Random) -> dict[str, Any]:
    """The first answer of each kind, checked field by field (the patch decoded)."""
    client = Client(served)
    out: dict[str, Any] = {"tls": None}
    for name, review in (("validate", validate), ("mutate", mutate)):
        uid = _uid(rng)
        t0 = time.perf_counter()
        status, data, app_ms = client.post(review, uid)
        elapsed = time.perf_counter() - t0
        wrong = problem(review, uid, status, data)
        if wrong:
            raise RuntimeError(f"{review.path}: {wrong}")
        response = msgspec.json.decode(data)["response"]
        row: dict[str, Any] = {
            "first_request_ms": round(elapsed * 1000, 3),
            "first_request_server_app_ms": app_ms,
            "uid_echoed": response["uid"] == uid,
            "allowed": response["allowed"],
            "answer_bytes": len(data),
            "warnings": response.get("warnings", []),
        }
        if review.mutating:
            ops = json.loads(base64.b64decode(response["patch"]))
            expected = "/spec/template/metadata/annotations"
            if not ops or any(op["op"] != "add" or not op["path"].startswith(expected) for op in ops):
                raise RuntimeError(f"/mutate: unexpected patch {ops}")
            row["patch_type"] = response["patchType"]
            row["patch"] = ops
        out[name] = row
    out["tls"] = client.tls()
    client.close()
    return out


def latency_stats(seconds: np.ndarray[Any, np.dtype[np.float64]]) -> dict[str, float]:
    if not len(seconds):
        return {"n": 0}
    a = seconds * 1000.0
    p50, p90, p99, p999 = (float(np.percentile(a, q)) for q in (50, 90, 99, 99.9))
    return {
        "n": len(a),
        "p50_ms": round(p50, 3),
        "p90_ms": round(p90, 3),
        "p99_ms": round(p99, 3),
        "p99_9_ms": round(p999, 3),
        "max_ms": round(float(a.max()), 3),
        "mean_ms": round(float(a.mean()), 3),
    }


def closed_loop(served: Served, bodies: Sequence[Review], rng: random.Random) -> dict[str, Any]:
    """One connection, one request at a time: latency with no load."""
    client = Client(served)
    t = np.empty((CLOSED_RUNS, 2), dtype=np.float64)  # round trip, server app (s)
    clock = time.perf_counter
    for i in range(CLOSED_WARMUP + CLOSED_RUNS):
        review = bodies[i % len(bodies)]
        uid = _uid(rng)
        t0 = clock()
        status, data, app_ms = client.post(review, uid)
        elapsed = clock() - t0
        wrong = problem(review, uid, status, data)
        if wrong:
            raise RuntimeError(f"{review.path}: {wrong}")
        if i >= CLOSED_WARMUP:
            t[i - CLOSED_WARMUP] = (elapsed, app_ms / 1000)
    client.close()
    return {"warmup": CLOSED_WARMUP, "round_trip": latency_stats(t[:, 0]), "server_app": latency_stats(t[:, 1])}


def fresh_connections(served: Served, bodies: Sequence[Review], rng: random.Random) -> dict[str, Any]:
    """A new TLS connection per review: handshake (with the SNI callback's certificate check) + review."""
    t = np.empty(FRESH_RUNS, dtype=np.float64)
    clock = time.perf_counter
    for i in range(FRESH_RUNS):
        review = bodies[i % len(bodies)]
        uid = _uid(rng)
        t0 = clock()
        client = Client(served)
        status, data, _ = client.post(review, uid)
        client.close()
        t[i] = clock() - t0
        wrong = problem(review, uid, status, data)
        if wrong:
            raise RuntimeError(f"{review.path}: {wrong}")
    return latency_stats(t)


def open_loop(
    served: Served,
    validate: Sequence[Review],
    mutate: Sequence[Review],
    rng: random.Random,
    *,
    rate: float,
    seconds: float,
    mutate_share: float,
) -> tuple[dict[str, Any], np.ndarray[Any, np.dtype[np.float64]]]:
    """``rate`` reviews/s for ``seconds`` over CONNECTIONS keep-alive connections, each on a fixed schedule.

    Request j is due at start + j / rate and goes on connection j % CONNECTIONS
    (each connection sends every CONNECTIONS / rate s). Latency runs from the
    due time to the last byte of the answer, so a request held up behind a
    slow one (or a late client thread) counts the wait; "service" runs from
    the actual send, "send lag" is how late the client sent, "server app" is
    the app's own time (``server-timing``). Returns the summary and every
    request's latency (s).
    """
    total = round(rate * seconds)
    n_mutate = round(total * mutate_share)
    kinds = [True] * n_mutate + [False] * (total - n_mutate)
    rng.shuffle(kinds)
    plan = [(mutate if m else validate)[j % DISTINCT_JOBS] for j, m in enumerate(kinds)]
    uids = [_uid(rng) for _ in range(total)]
    sent = np.zeros(total, dtype=np.float64)
    done = np.zeros(total, dtype=np.float64)
    app = np.full(total, np.nan, dtype=np.float64)
    ok = np.zeros(total, dtype=bool)
    failures: list[str] = []
    errors: list[BaseException] = []
    start: list[float] = []
    barrier = threading.Barrier(CONNECTIONS, action=lambda: start.append(time.perf_counter() + 0.05))
    clock = time.perf_counter

    def worker(k: int) -> None:
        try:
            client = Client(served)
            for i in range(CONNECTION_WARMUP):  # handshake and warm up before the clock starts
                review = (validate, mutate)[i % 2][(k * 31 + i) % DISTINCT_JOBS]
                client.post(review, _uid(random.Random(k * 1000 + i)))
            barrier.wait()
            t0 = start[0]
            for j in range(k, total, CONNECTIONS):
                due = t0 + j / rate
                delay = due - clock()
                if delay > 0:
                    time.sleep(delay)
                review = plan[j]
                sent[j] = clock()
                try:
                    status, data, app_ms = client.post(review, uids[j])
                except (OSError, http.client.HTTPException) as exc:
                    done[j] = clock()
                    failures.append(f"{review.path}: {type(exc).__name__}: {exc}")
                    client.reconnect()
                    continue
                done[j] = clock()
                app[j] = app_ms / 1000
                wrong = problem(review, uids[j], status, data)
                if wrong:
                    failures.append(f"{review.path}: {wrong}")
                else:
                    ok[j] = True
            client.close()
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    host0, cpu0, server_cpu0, wall0 = host_counters(), time.process_time(), process_cpu_s(served.pid), clock()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(CONNECTIONS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    wall = clock() - wall0
    client_cpu, server_cpu = time.process_time() - cpu0, process_cpu_s(served.pid) - server_cpu0
    host = host_share(host0, host_counters(), wall)
    t0 = start[0]
    due = t0 + np.arange(total, dtype=np.float64) / rate
    latency, service, lag = done - due, done - sent, sent - due
    span = float(done.max() - t0)
    is_mutate = np.array(kinds, dtype=bool)
    window = (np.arange(total) / rate / 0.1).astype(np.int64)
    window_max = np.zeros(int(window.max()) + 1, dtype=np.float64)
    np.maximum.at(window_max, window, latency)
    out: dict[str, Any] = {
        "offered_per_s": rate,
        "requests": total,
        "mutate_share": mutate_share,
        "connections": CONNECTIONS,
        "achieved_per_s": round(int(ok.sum()) / span, 1),
        "span_s": round(span, 3),
        "errors": len(failures),
        "error_samples": sorted(set(failures))[:5],
        "latency": latency_stats(latency),
        "service": latency_stats(service),
        "server_app": latency_stats(app[~np.isnan(app)]),
        "send_lag": latency_stats(lag),
        "over_5ms": int((latency > 0.005).sum()),
        # Slow answers bunched into a few windows are stalls of the machine, spread over all of them queueing.
        "windows_100ms": len(window_max),
        "windows_100ms_with_one_over_5ms": int((window_max > 0.005).sum()),
        # CPU over the whole run (connection warm-up included): server and client share os.cpu_count() CPUs.
        "server_cpu_fraction": round(server_cpu / wall, 3),
        "client_cpu_fraction": round(client_cpu / wall, 3),
        "server_cpu_us_per_review": round(server_cpu / (total + CONNECTIONS * CONNECTION_WARMUP) * 1e6, 1),
        "client_cpu_us_per_review": round(client_cpu / (total + CONNECTIONS * CONNECTION_WARMUP) * 1e6, 1),
        **host,
    }
    if 0 < n_mutate < total:
        out["latency_validate"] = latency_stats(latency[~is_mutate])
        out["latency_mutate"] = latency_stats(latency[is_mutate])
    return out, latency


def quiet_open_loop(
    served: Served, validate: Sequence[Review], mutate: Sequence[Review], rng: random.Random, *, mutate_share: float
) -> tuple[dict[str, Any], np.ndarray[Any, np.dtype[np.float64]]]:
    """The target's load, run again (up to ATTEMPTS times) while the hypervisor steals more than QUIET_STEAL.

    Steal is CPU time the VM wanted and the host gave to another guest: a
    fact about the neighbours, not about kilter, and a run with 10% steal has
    a p99 ten times a quiet one's. The run kept is the first quiet one (or, if
    none was, the one with the least steal); the runs set aside are listed in
    it with their p99 and steal, so nothing measured is hidden.
    """
    attempts: list[tuple[dict[str, Any], np.ndarray[Any, np.dtype[np.float64]]]] = []
    for _ in range(ATTEMPTS):
        attempts.append(open_loop(served, validate, mutate, rng, rate=RATE, seconds=LOAD_S, mutate_share=mutate_share))
        if attempts[-1][0]["steal_fraction"] <= QUIET_STEAL:
            break
    kept = min(attempts, key=lambda attempt: attempt[0]["steal_fraction"])
    kept[0]["set_aside_for_steal"] = [
        {"p99_ms": run["latency"]["p99_ms"], "steal_fraction": run["steal_fraction"]}
        for run, _ in attempts
        if run is not kept[0]
    ]
    return kept


# ---------------------------------------------------------------------------------------------- in-process


def _cycling(app: WebhookApp, bodies: Sequence[bytes], *, mutating: bool) -> Callable[[], object]:
    it = cycle(bodies)

    def call() -> object:
        status, data = app.review(next(it), mutating=mutating)
        if status != 200:
            raise RuntimeError(data.decode())
        return data

    return call


def in_process(
    snapshot: Path, validate: Sequence[Review], mutate: Sequence[Review], rng: random.Random
) -> tuple[WebhookApp, dict[str, Any], dict[str, list[bytes]]]:
    """``WebhookApp.review`` called directly: the server's time with no TLS, no HTTP and no event loop."""
    t0 = time.perf_counter()
    _, store = build_app(serve_config(snapshot))
    settle()
    app = webhook_app(store, [])
    load_s = time.perf_counter() - t0
    bodies = {
        "validate": [r.body(_uid(rng)) for r in validate],
        "mutate": [r.body(_uid(rng)) for r in mutate],
    }
    decode = cycle(bodies["validate"])
    results = {
        "load_snapshot_and_build_s": round(load_s, 2),
        "validate": measure(
            _cycling(app, bodies["validate"], mutating=False), runs=IN_PROCESS_RUNS, warmup=IN_PROCESS_WARMUP
        ),
        "mutate": measure(
            _cycling(app, bodies["mutate"], mutating=True), runs=IN_PROCESS_RUNS, warmup=IN_PROCESS_WARMUP
        ),
        "decode_validate_review_only": measure(lambda: app.decoder.decode(next(decode)), runs=IN_PROCESS_RUNS),
        # As in a server at a few hundred reviews/s: the CPU idles between reviews, so each one starts cold.
        "validate_after_1ms_idle": measure(
            _cycling(app, bodies["validate"], mutating=False), runs=PACED_RUNS, warmup=20, pause_s=IDLE_S
        ),
        "mutate_after_1ms_idle": measure(
            _cycling(app, bodies["mutate"], mutating=True), runs=PACED_RUNS, warmup=20, pause_s=IDLE_S
        ),
    }
    return app, results, bodies


def profile(app: WebhookApp, bodies: Sequence[bytes], *, mutating: bool, top: int = 12) -> dict[str, Any]:
    """Where one in-process review spends its time (cProfile): by own time; kilter's functions by cumulative time."""
    call = _cycling(app, bodies, mutating=mutating)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(PROFILE_RUNS):
        call()
    prof.disable()
    stats = pstats.Stats(prof)
    rows = []
    entries: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (file, line, func), (_, calls, own, cumulative, _) in entries.items():
        rows.append(
            {
                "function": f"{Path(file).name}:{line}({func})",
                "in_kilter": f"{os.sep}kilter{os.sep}" in file,
                "calls_per_review": round(calls / PROFILE_RUNS, 2),
                "own_us_per_review": round(own / PROFILE_RUNS * 1e6, 2),
                "cumulative_us_per_review": round(cumulative / PROFILE_RUNS * 1e6, 2),
            }
        )
    own_rows = sorted(rows, key=lambda r: r["own_us_per_review"], reverse=True)[:top]
    kilter_rows = sorted(
        (r for r in rows if r["in_kilter"]), key=lambda r: r["cumulative_us_per_review"], reverse=True
    )[:top]
    return {
        "note": "cProfile roughly doubles these times; compare them with each other, not with the timings",
        "by_own_time": [{k: v for k, v in r.items() if k != "in_kilter"} for r in own_rows],
        "kilter_by_cumulative_time": [{k: v for k, v in r.items() if k != "in_kilter"} for r in kilter_rows],
    }


# ---------------------------------------------------------------------------------------------- main


def main() -> dict[str, Any]:
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    speed_before = machine_speed()
    rng = random.Random(23)
    nodes, bound = fleet_objects()
    kueue = kueue_objects()
    validate = reviews(rng, mutating=False)
    mutate = reviews(rng, mutating=True)
    results: dict[str, Any] = {
        "fleet": {
            "platform": "GB200-NVL72",
            "racks": RACKS,
            "nodes": len(nodes),
            "gpus": 4 * len(nodes),
            "bound_pods": len(bound),
        },
        "kueue": {
            "cluster_queue": CLUSTER_QUEUE,
            "cluster_queue_annotations": {TOPOLOGY_POLICY: "auto"},
            "local_queue": f"{NAMESPACE}/{LOCAL_QUEUE}",
            "quota": {
                r["name"]: r["nominalQuota"] for r in kueue[1]["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
            },
        },
        "job": {
            "kind": "batch/v1 Job",
            "pods": PODS,
            "gpus_per_pod": GPUS_PER_POD,
            "validate_asks": f"{REQUIRED}: {CLIQUE} (pod template)",
            "mutate_asks": f"{TOPOLOGY}: auto (job)",
        },
        "targets_ms": TARGETS_MS,
        "review_bytes": {"validate": len(validate[0].body(PLACEHOLDER)), "mutate": len(mutate[0].body(PLACEHOLDER))},
    }
    with tempfile.TemporaryDirectory(prefix="kilter-bench-") as tmp:
        snapshot = Path(tmp) / "snapshot.json"
        write_snapshot(snapshot, [*nodes, *bound, fleetgen.topology_object(), *kueue])
        results["fleet"]["snapshot_bytes"] = snapshot.stat().st_size
        cert, key, ca = make_certificates(Path(tmp))
        del nodes, bound
        # The client's own setup objects out of the cyclic collector's sight, as the server does with its state.
        gc.collect()
        gc.freeze()
        with serving(snapshot, cert, key, ca) as served:
            results["server_ready_s"] = round(served.ready_s, 2)
            results["first_answers"] = first_answers(served, validate[0], mutate[0], rng)
            results["closed_loop_1_connection"] = {
                "validate": closed_loop(served, validate, rng),
                "mutate": closed_loop(served, mutate, rng),
            }
            results["fresh_tls_connection_per_review"] = fresh_connections(served, validate, rng)
            load: dict[str, Any] = {}
            pooled = []
            for name, share in (("mixed", 0.5), ("validate_only", 0.0), ("mutate_only", 1.0)):
                load[name], latency = quiet_open_loop(served, validate, mutate, rng, mutate_share=share)
                pooled.append(latency)
            results[f"open_loop_{RATE}_per_s"] = load
            results[f"open_loop_{RATE}_per_s_all_runs"] = latency_stats(np.concatenate(pooled))
            results["open_loop_headroom_mixed"] = {
                str(rate): open_loop(served, validate, mutate, rng, rate=rate, seconds=seconds, mutate_share=0.5)[0]
                for rate, seconds in HEADROOM
            }
        app, results["in_process_review"], bodies = in_process(snapshot, validate, mutate, rng)
    at_target = results[f"open_loop_{RATE}_per_s"]
    review_us = results["in_process_review"]
    closed = results["closed_loop_1_connection"]
    results["where_the_time_goes_us"] = {
        "closed_loop_round_trip_p50": round(
            500 * (closed["validate"]["round_trip"]["p50_ms"] + closed["mutate"]["round_trip"]["p50_ms"]), 1
        ),
        "closed_loop_server_app_p50": round(
            500 * (closed["validate"]["server_app"]["p50_ms"] + closed["mutate"]["server_app"]["p50_ms"]), 1
        ),
        "server_cpu_per_review_at_500_per_s": at_target["mixed"]["server_cpu_us_per_review"],
        "review_in_process_p50": round((review_us["validate"]["p50_us"] + review_us["mutate"]["p50_us"]) / 2, 1),
        "review_in_process_after_1ms_idle_p50": round(
            (review_us["validate_after_1ms_idle"]["p50_us"] + review_us["mutate_after_1ms_idle"]["p50_us"]) / 2, 1
        ),
        "client_cpu_per_review_at_500_per_s": at_target["mixed"]["client_cpu_us_per_review"],
    }
    # The target is judged on all 15,000 reviews sent at 500/s (the three runs); each run's p99 is kept beside it.
    results[f"open_loop_{RATE}_per_s_p99_ms_by_run"] = {
        name: run["latency"]["p99_ms"] for name, run in at_target.items()
    }
    measured = {"open_loop_500_per_s_p99": results[f"open_loop_{RATE}_per_s_all_runs"]["p99_ms"]}
    results["targets_met"] = {key: measured[key] <= target for key, target in TARGETS_MS.items()}
    results["targets_judged_on_quiet_host"] = all(run["steal_fraction"] <= QUIET_STEAL for run in at_target.values())
    if not all(results["targets_met"].values()):
        results["profile_in_process"] = {
            "validate": profile(app, bodies["validate"], mutating=False),
            "mutate": profile(app, bodies["mutate"], mutating=True),
        }
    # The hypervisor's share: a run with a few % steal has a p99 several times that of a quiet one.
    runs = [*at_target.values(), *results["open_loop_headroom_mixed"].values()]
    results["host_during_load_runs"] = {
        "steal_fraction_max": max(run["steal_fraction"] for run in runs),
        "cpu_pressure_some_fraction_max": max(run["cpu_pressure_some_fraction"] for run in runs),
    }
    # Anything else running on the machine shows in the p99s: the 1-minute load average around the run.
    results["load_average_1m"] = {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)}
    results["reference_loop_us"] = {"before": speed_before, "after": machine_speed()}
    results["runtime_s"] = round(time.perf_counter() - started, 1)
    return results


if __name__ == "__main__":
    print(write("webhooks", main()))

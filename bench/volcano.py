"""Volcano's ``extender`` plugin verbs under load: ``kilter serve`` run for real, over HTTP, on a 5,004-node fleet.

Targets (issue #6): ``predicate`` p99 <= 0.2 ms per (task, node) call, and
``prioritize`` over 5,000 nodes p99 <= 20 ms, both on the server's app time
(the ``server-timing`` header: whole body read to answer encoded), round
trips reported beside them. The server (uvicorn + httptools + uvloop, as
``kilter serve`` runs it) lives in its own process over a snapshot file: the
GB200 fleet of bench/extender.py (5,004 nodes, 60 % of the GPUs held by bound
pods), its Topology, a Cohort with two ClusterQueues of ``nvidia.com/gpu``
quota (flavor ``gb200``) and two Volcano Queues, one bound by the
``kilter.dev/cluster-queue`` annotation and one by name. The client posts
bodies exactly as Volcano (HEAD) marshals them (tests/extenders/volcano/payloads.py),
``Content-Type: application/json`` over keep-alive HTTP/1.1.

Before timing, ``onSessionOpen`` with a realistic session (276 jobs, 1,473
tasks, both queues; the cohort full and one queue borrowing) is posted and
timed, with 500 NodeInfos (41 MB) and with all 5,004 (110 MB), each followed
by the session's first quota verb (which builds the quota view): Volcano
sends it every scheduling cycle (1 s by default) and the manifest gives the
extender 500 ms. ``predicate`` is posted for one task of a single-pod job and
one of an 8-pod gang (planned whole on its first call, timed apart) against
every node's realistic NodeInfo (~15 KB: the v1.Node with managedFields and
images, its tasks with their Pods), on one connection and on four at once.
``prioritize`` is posted for the same tasks with all 5,004 NodeInfos (76 MB
a body), then with "compact" NodeInfos (the Node's managedFields and images,
the ImageStates derived from them and the task Pods' managedFields left out,
37 MB), and with the 1,761 NodeInfos the single task passed the predicate on,
to show how the time follows the bytes; the target is judged on the
realistic bodies. The quota verbs (jobEnqueueable, queueOverused,
reclaimable, allocateFunc/deallocateFunc) get a few hundred calls each. The
verbs are also called in-process (``app.volcano.call``), their bodies decoded
alone, to tell kilter's time from the HTTP server's and decoding from
deciding. Every load run records the CPU the hypervisor stole during it; a
target run with more than 2 % steal is repeated (up to three runs, the ones
set aside listed).
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from itertools import cycle
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from bench.common import host_counters, host_share, machine_speed, measure, process_cpu_s, write
from bench.extender import GPU, GPU_TAINT, RACKS, Client, fleet_objects, serve_http, stats
from bench.server import serve_config, server_process
from kilter.cli.serve import build_app
from kilter.extenders.volcano import VolcanoExtender
from kilter.extenders.volcano import wire as vw
from kilter.model.annotations import CLUSTER_QUEUE
from kilter.model.volcano import NetworkTopologySpec
from kilter.state.feed import settle
from kilter.topology import fleetgen
from tests.extenders.volcano import payloads as vp

VERSION: vp.VolcanoVersion = "head"
COHORT, FLAVOR = "gpu-pool", "gb200"
TRAINING_CQ, RESEARCH_CQ = "training", "research"
TRAINING_QUEUE, RESEARCH_QUEUE = "ml-training", "research"  # bound by annotation / by name
NOMINAL = {TRAINING_CQ: 3000, RESEARCH_CQ: 1500}
CQ_ANNOTATION = CLUSTER_QUEUE
GANG, GPUS = 8, 4  # gangs of 8 pods, each pod a whole 4-GPU GB200 tray
SESSION_NODES = 500  # NodeInfos in the timed sessions (only their names matter to kilter)
SESSION_RUNS, SESSION_ALL_NODES_RUNS = 10, 3
PREDICATE_WARMUP, THREADS, THREAD_WARMUP = 100, 4, 25
PRIORITIZE_RUNS, PRIORITIZE_WARMUP = 30, 2
VERB_RUNS, VERB_WARMUP = 300, 20
IN_PROCESS_PREDICATE_RUNS, IN_PROCESS_PRIORITIZE_RUNS = 2000, 8
PACED_RUNS, IDLE_S = 1000, 0.0003
QUIET_STEAL, ATTEMPTS = 0.02, 3
TARGETS_MS = {
    "predicate_server_p99": 0.2,
    "prioritize_5004_realistic_server_p99": 20.0,
}
# Reported beside the targets, not judged: four client threads and the server share this VM's two CPUs.
REPORTED_MS = ("predicate_4_connections_server_p99",)

Json = dict[str, Any]


# ---------------------------------------------------------------------------------------------- objects


def quota_objects() -> list[Json]:
    """Cohort, flavor, the two ClusterQueues (GPU quota only) and the two Volcano Queues."""

    def cluster_queue(name: str) -> Json:
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                "cohortName": COHORT,
                "namespaceSelector": {},
                "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [{"name": FLAVOR, "resources": [{"name": GPU, "nominalQuota": str(NOMINAL[name])}]}],
                    }
                ],
            },
        }

    def volcano_queue(name: str, annotations: dict[str, str] | None = None) -> Json:
        meta: Json = {"name": name, **({"annotations": annotations} if annotations else {})}
        return {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": meta,
            "spec": {"weight": 1, "reclaimable": True},
        }

    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": COHORT}, "spec": {}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": FLAVOR},
            "spec": {
                "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-GB200"},
                "topologyName": "gpu-fabric",
                "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
        cluster_queue(TRAINING_CQ),
        cluster_queue(RESEARCH_CQ),
        volcano_queue(TRAINING_QUEUE, {CQ_ANNOTATION: TRAINING_CQ}),
        volcano_queue(RESEARCH_QUEUE),
    ]


def write_snapshot(path: Path, items: Sequence[Json]) -> None:
    path.write_bytes(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(items)}).encode())


def _ready(node: Json) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))


def node_infos(nodes: Sequence[Json], used: dict[str, int]) -> tuple[list[bytes], list[bytes]]:
    """Each node's NodeInfo as Volcano marshals it: realistic, and compact (managedFields and images left out).

    Built one at a time and kept only as bytes: 5,004 of them as dicts would
    hold several GB.
    """
    realistic, compact = [], []
    for node in nodes:
        meta = node["metadata"]
        name = meta["name"]
        obj = vp.node(
            name,
            gpus=GPUS,
            labels=meta["labels"],
            ready=_ready(node),
            cpu="144",
            memory="884Gi",
            taints=[GPU_TAINT],
            gpu_product="NVIDIA-GB200",
        )
        if node["spec"].get("unschedulable"):
            obj["spec"]["unschedulable"] = True
        info = vp.node_info(name, gpus=GPUS, used_gpus=used.get(name, 0), node_obj=obj, version=VERSION)
        realistic.append(vp.to_go_json(info))
        obj["metadata"].pop("managedFields", None)
        obj["status"].pop("images", None)
        info["ImageStates"] = {}
        for task in info["Tasks"].values():
            task["Pod"]["metadata"].pop("managedFields", None)
        compact.append(vp.to_go_json(info))
    return realistic, compact


def volcano_job(
    namespace: str, name: str, queue: str, *, pods: int, phase: str, nodes: Sequence[str] = (), reserve: bool = True
) -> Json:
    """A JobInfo of ``pods`` 4-GPU tasks (a gang when ``pods`` > 1); the first ``len(nodes)`` run on those nodes."""
    tasks = []
    for i in range(pods):
        pod = vp.pod(
            namespace,
            f"{name}-{i}",
            vp.stable_uid("pod", namespace, name, str(i)),
            gpus=GPUS,
            group=name,
            node_name=nodes[i] if i < len(nodes) else "",
            cpu="64",
            memory="800Gi",
        )
        tasks.append(vp.task_info(pod, version=VERSION))
    return vp.job_info(
        namespace,
        name,
        queue=queue,
        min_available=pods,
        tasks=tasks,
        min_resources={GPU: str(pods * GPUS)} if reserve else None,
        phase=phase,
        version=VERSION,
    )


def session_jobs(full_nodes: Sequence[str]) -> dict[str, list[Json]]:
    """The session's jobs by role; running ones sit on nodes the snapshot's bound pods fill.

    training (nominal 3,000 GPUs) runs 100 gangs (3,200: it borrows 200);
    research (nominal 1,500) runs 35 gangs (1,120) and holds 180 more for
    5 single-pod and 5 gang jobs enqueued (Inqueue, minResources reserved),
    so the cohort's 4,500 are all taken; one more research gang was enqueued
    once reclaimed (the cohort holds 32 more than it has). 130 jobs wait
    (Pending) in both queues.
    """
    it = iter(full_nodes)

    def running(namespace: str, name: str, queue: str) -> Json:
        return volcano_job(namespace, name, queue, pods=GANG, phase="Running", nodes=[next(it) for _ in range(GANG)])

    t, r = TRAINING_QUEUE, RESEARCH_QUEUE
    return {
        "training_running": [running("ml", f"train-{i:03d}", t) for i in range(100)],
        "training_pending_single": [volcano_job("ml", f"infer-{i:03d}", t, pods=1, phase="Pending") for i in range(60)],
        "training_pending_gang": [
            volcano_job("ml", f"pretrain-{i:03d}", t, pods=GANG, phase="Pending") for i in range(20)
        ],
        "research_running": [running("research", f"exp-{i:03d}", r) for i in range(35)],
        "research_inqueue_single": [
            volcano_job("research", f"probe-{i}", r, pods=1, phase="Inqueue") for i in range(5)
        ],
        "research_inqueue_gang": [
            volcano_job("research", f"sweep-{i}", r, pods=GANG, phase="Inqueue") for i in range(5)
        ],
        "research_reclaiming": [volcano_job("research", "reclaim-0", r, pods=GANG, phase="Inqueue")],
        "research_pending_single": [
            volcano_job("research", f"eval-{i:03d}", r, pods=1, phase="Pending") for i in range(40)
        ],
        "research_pending_gang": [
            volcano_job("research", f"ablate-{i:03d}", r, pods=GANG, phase="Pending") for i in range(10)
        ],
    }


def queue_infos() -> list[Json]:
    return [
        vp.queue_info(TRAINING_QUEUE, annotations={CQ_ANNOTATION: TRAINING_CQ}, version=VERSION),
        vp.queue_info(RESEARCH_QUEUE, version=VERSION),
    ]


def session_body(jobs: Sequence[Json], nodes: Sequence[tuple[str, bytes]]) -> bytes:
    """onSessionOpen as Volcano marshals it (Jobs, Nodes, Queues keyed and sorted as Go writes maps)."""
    args = vp.session_open_args(jobs, [], queue_infos())
    node_map = b",".join(vp.to_go_json(name) + b":" + body for name, body in sorted(nodes))
    return (
        b'{"Jobs":'
        + vp.to_go_json(args["Jobs"])
        + b',"Nodes":{'
        + node_map
        + b'},"Queues":'
        + vp.to_go_json(args["Queues"])
        + b',"NamespaceInfo":{},"RevocableNodes":{},"NodeList":null}'
    )


def _first_task(job: Json) -> Json:
    return next(t for t in job["Tasks"].values() if t["Name"].endswith("-0"))


def predicate_body(task: bytes, node: bytes) -> bytes:
    return b'{"task":' + task + b',"node":' + node + b"}"


def prioritize_body(task: bytes, nodes: Sequence[bytes]) -> bytes:
    return b'{"task":' + task + b',"nodes":[' + b",".join(nodes) + b"]}"


# ---------------------------------------------------------------------------------------------- load runs


class Host:
    """CPU stolen by the hypervisor and the server's CPU over one run."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.host0, self.server0, self.wall0 = host_counters(), process_cpu_s(pid), time.perf_counter()

    def done(self) -> dict[str, float]:
        wall = time.perf_counter() - self.wall0
        out = host_share(self.host0, host_counters(), wall)
        out["server_cpu_fraction"] = round((process_cpu_s(self.pid) - self.server0) / wall, 3)
        out["wall_s"] = round(wall, 3)
        return out


def _both(server: np.ndarray[Any, np.dtype[np.float64]], trip: np.ndarray[Any, np.dtype[np.float64]]) -> Json:
    return {
        "server": stats(server),
        "round_trip": stats(trip),
        "round_trip_minus_server_p50_ms": round(float(np.median(trip - server)), 3),
    }


def quiet(run: Callable[[], Json]) -> Json:
    """``run`` again (up to ATTEMPTS runs) while the hypervisor steals more than QUIET_STEAL; the quietest kept."""
    attempts: list[Json] = []
    for _ in range(ATTEMPTS):
        attempts.append(run())
        if attempts[-1]["steal_fraction"] <= QUIET_STEAL:
            break
    kept = min(attempts, key=lambda a: a["steal_fraction"])
    kept["set_aside_for_steal"] = [
        {"server_p99_ms": a["server"]["p99_ms"], "steal_fraction": a["steal_fraction"]}
        for a in attempts
        if a is not kept
    ]
    return kept


def first_predicate(port: int, task: bytes, node: bytes) -> Json:
    client = Client(port)
    trip, server, data = client.post("/volcano/predicate", predicate_body(task, node))
    client.close()
    return {"round_trip_ms": round(trip, 3), "server_ms": server, "answer": msgspec.json.decode(data)}


def predicate_run(port: int, pid: int, task: bytes, nodes: Sequence[bytes], order: Sequence[int]) -> Json:
    """One keep-alive connection, one call at a time, each to a different node's NodeInfo."""
    client = Client(port)
    for i in range(PREDICATE_WARMUP):
        client.post("/volcano/predicate", predicate_body(task, nodes[order[i]]))
    t = np.empty((len(order), 2), dtype=np.float64)
    codes: Counter[int] = Counter()
    passed: list[int] = []
    host = Host(pid)
    for k, i in enumerate(order):
        trip, server, data = client.post("/volcano/predicate", predicate_body(task, nodes[i]))
        t[k] = (trip, server)
        code = msgspec.json.decode(data)["code"]
        codes[code] += 1
        if code == vw.SUCCESS:
            passed.append(i)
    out: Json = {"calls": len(order), **host.done(), **_both(t[:, 1], t[:, 0])}
    client.close()
    out["codes"] = {str(c): n for c, n in sorted(codes.items())}
    out["calls_per_s"] = round(len(order) / out["wall_s"], 1)
    out["_passed"] = sorted(passed)
    return out


def predicate_concurrent(port: int, pid: int, task: bytes, nodes: Sequence[bytes], order: Sequence[int]) -> Json:
    """THREADS connections at once, each posting its share of the nodes one call at a time."""
    shares = [list(order[k::THREADS]) for k in range(THREADS)]
    per: list[np.ndarray[Any, np.dtype[np.float64]]] = [np.empty((len(s), 2), dtype=np.float64) for s in shares]
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS + 1)

    def worker(k: int) -> None:
        try:
            client = Client(port)
            for i in shares[k][:THREAD_WARMUP]:
                client.post("/volcano/predicate", predicate_body(task, nodes[i]))
            barrier.wait()
            out = per[k]
            for j, i in enumerate(shares[k]):
                trip, server, _ = client.post("/volcano/predicate", predicate_body(task, nodes[i]))
                out[j] = (trip, server)
            client.close()
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
    for th in threads:
        th.start()
    barrier.wait()
    host = Host(pid)
    for th in threads:
        th.join()
    shared = host.done()
    if errors:
        raise errors[0]
    t = np.concatenate(per)
    return {
        "connections": THREADS,
        "calls": len(t),
        "calls_per_s": round(len(t) / shared["wall_s"], 1),
        **shared,
        **_both(t[:, 1], t[:, 0]),
    }


def prioritize_run(port: int, pid: int, body: bytes, nodes: int, *, runs: int = PRIORITIZE_RUNS) -> Json:
    client = Client(port)
    first: Json = {}
    for i in range(PRIORITIZE_WARMUP):
        trip, server, data = client.post("/volcano/prioritize", body)
        if i == 0:
            answer = msgspec.json.decode(data)
            if answer["errorMessage"] or len(answer["nodeScore"]) != nodes:
                raise RuntimeError(f"prioritize: {answer['errorMessage']!r}, {len(answer['nodeScore'])} scores")
            scores = Counter(answer["nodeScore"].values())
            first = {
                "round_trip_ms": round(trip, 3),
                "server_ms": server,
                "answer_bytes": len(data),
                "nodes_scored_above_0": sum(n for s, n in scores.items() if s > 0),
                "scores_seen": sorted(scores),
            }
    t = np.empty((runs, 2), dtype=np.float64)
    host = Host(pid)
    for k in range(runs):
        trip, server, _ = client.post("/volcano/prioritize", body)
        t[k] = (trip, server)
    out: Json = {"nodes": nodes, "body_bytes": len(body), "body_mb": round(len(body) / 1e6, 1), **host.done()}
    client.close()
    return {**out, "first": first, **_both(t[:, 1], t[:, 0])}


def verb_run(port: int, pid: int, calls: Sequence[tuple[str, bytes]], *, runs: int) -> Json:
    """``runs`` rounds of ``calls`` (verb, body) in order on one connection; per verb stats and answers seen."""
    client = Client(port)
    verbs = sorted({v for v, _ in calls})
    samples: dict[str, list[tuple[float, float]]] = {v: [] for v in verbs}
    answers: dict[str, Counter[bytes]] = {v: Counter() for v in verbs}
    body_bytes: dict[str, list[int]] = {v: [] for v in verbs}
    sequence = cycle(calls)
    for _ in range(VERB_WARMUP):
        verb, body = next(sequence)
        client.post(f"/volcano/{verb}", body)
    host = Host(pid)
    for _ in range(runs):
        verb, body = next(sequence)
        trip, server, data = client.post(f"/volcano/{verb}", body)
        samples[verb].append((trip, server))
        answers[verb][_answer_kind(verb, data)] += 1
        body_bytes[verb].append(len(body))
    shared = host.done()
    client.close()
    out: Json = {"host": shared}
    for verb in verbs:
        t = np.asarray(samples[verb], dtype=np.float64)
        out[verb] = {
            "calls": len(t),
            "body_bytes_mean": round(float(np.mean(body_bytes[verb]))),
            **_both(t[:, 1], t[:, 0]),
            "answers": {k.decode(): n for k, n in answers[verb].most_common(6)},
        }
    return out


def _answer_kind(verb: str, data: bytes) -> bytes:
    """The answer with victims counted instead of echoed (they are whole TaskInfos)."""
    if verb in ("reclaimable", "preemptable"):
        answer = msgspec.json.decode(data)
        return f'{{"status":{answer["status"]},"victims":<{len(answer["victims"])}>}}'.encode()
    if verb in ("allocateFunc", "deallocateFunc"):
        message = msgspec.json.decode(data)["errorMessage"]
        return b'{"errorMessage":""}' if not message else b'{"errorMessage":"' + message[:60].encode() + b'..."}'
    return data


def session_run(port: int, pid: int, body: bytes, then: bytes, *, runs: int) -> Json:
    """onSessionOpen, then the first quota verb of the session (which builds the quota view), ``runs`` times."""
    client = Client(port)
    client.post("/volcano/onSessionOpen", body)
    client.post("/volcano/jobEnqueueable", then)
    t = np.empty((runs, 4), dtype=np.float64)
    host = Host(pid)
    for k in range(runs):
        trip, server, data = client.post("/volcano/onSessionOpen", body)
        if data != b"{}":
            raise RuntimeError(f"onSessionOpen answered {data[:200]!r}")
        first_trip, first_server, _ = client.post("/volcano/jobEnqueueable", then)
        t[k] = (trip, server, first_trip, first_server)
    out: Json = {"body_bytes": len(body), "body_mb": round(len(body) / 1e6, 1), "runs": runs, **host.done()}
    client.close()
    out |= _both(t[:, 1], t[:, 0])
    out["first_quota_verb_after_open"] = _both(t[:, 3], t[:, 2])
    return out


# ---------------------------------------------------------------------------------------------- in-process


class _TaskNoPod(msgspec.Struct):
    """``TaskInfo`` without its Pod: what the predicate decode would cost if the Pod were read only for planning."""

    uid: str = msgspec.field(name="UID", default="")
    job: str = msgspec.field(name="Job", default="")
    name: str = msgspec.field(name="Name", default="")
    namespace: str = msgspec.field(name="Namespace", default="")
    task_role: str = msgspec.field(name="TaskRole", default="")
    resreq: vw.Resource | None = msgspec.field(name="Resreq", default=None)
    node_name: str = msgspec.field(name="NodeName", default="")
    status: int = msgspec.field(name="Status", default=0)
    priority: int = msgspec.field(name="Priority", default=0)


class _PredicateNoPod(msgspec.Struct):
    task: _TaskNoPod | None = None
    node: vw.NodeName | None = None


class _JobNoPods(msgspec.Struct):
    """``JobInfo`` with its tasks read without their Pods."""

    uid: str = msgspec.field(name="UID", default="")
    name: str = msgspec.field(name="Name", default="")
    namespace: str = msgspec.field(name="Namespace", default="")
    queue: str = msgspec.field(name="Queue", default="")
    priority: int = msgspec.field(name="Priority", default=0)
    min_available: int = msgspec.field(name="MinAvailable", default=0)
    network_topology: NetworkTopologySpec | None = msgspec.field(name="NetworkTopology", default=None)
    tasks: dict[str, _TaskNoPod] | None = msgspec.field(name="Tasks", default=None)
    allocated: vw.Resource | None = msgspec.field(name="Allocated", default=None)
    total_request: vw.Resource | None = msgspec.field(name="TotalRequest", default=None)
    creation_timestamp: str | None = msgspec.field(name="CreationTimestamp", default=None)
    pod_group: vw.WirePodGroup | None = msgspec.field(name="PodGroup", default=None)


class _SessionLean(msgspec.Struct):
    """``SessionOpenArgs`` without the Nodes (kilter does not read them) and without the tasks' Pods."""

    jobs: dict[str, _JobNoPods] | None = msgspec.field(name="Jobs", default=None)
    queues: dict[str, vw.QueueInfo] | None = msgspec.field(name="Queues", default=None)


def _cycling(volcano: VolcanoExtender, verb: str, bodies: Sequence[bytes]) -> Callable[[], object]:
    it = cycle(bodies)

    def call() -> object:
        answer = volcano.call(verb, next(it))
        if answer.status != 200:
            raise RuntimeError(f"{verb}: {answer.body[:200]!r}")
        return answer

    return call


def _decoding(kind: type[msgspec.Struct], bodies: Sequence[bytes]) -> Callable[[], object]:
    decoder = msgspec.json.Decoder(kind)
    it = cycle(bodies)
    return lambda: decoder.decode(next(it))


def in_process(snapshot: Path, b: dict[str, Any]) -> Json:
    """The verbs called on ``app.volcano`` (no HTTP, no event loop), and their bodies decoded alone."""
    t0 = time.perf_counter()
    app, _ = build_app(serve_config(snapshot))
    settle()
    load_s = time.perf_counter() - t0
    volcano = app.volcano
    assert volcano is not None
    out: Json = {"load_snapshot_and_build_s": round(load_s, 2)}
    session = b["session"]
    out["onSessionOpen"] = {
        "body_mb": round(len(session) / 1e6, 1),
        "call": measure(partial(volcano.call, "onSessionOpen", session), runs=SESSION_RUNS, warmup=1),
        "decode_only": measure(_decoding(vw.SessionOpenArgs, [session]), runs=SESSION_RUNS, warmup=1),
        "decode_without_nodes_and_task_pods": measure(_decoding(_SessionLean, [session]), runs=SESSION_RUNS, warmup=1),
    }

    def open_then_first() -> None:
        volcano.call("onSessionOpen", session)
        volcano.call("jobEnqueueable", b["enqueue_first"])

    out["onSessionOpen"]["call_then_first_quota_verb"] = measure(open_then_first, runs=SESSION_RUNS, warmup=1)
    volcano.call("onSessionOpen", session)
    for kind in ("single", "gang"):
        bodies = [predicate_body(b["tasks"][kind], n) for n in b["realistic"][:IN_PROCESS_PREDICATE_RUNS]]
        out[f"predicate_{kind}"] = {
            "call": measure(_cycling(volcano, "predicate", bodies), runs=len(bodies), warmup=50),
            # As in the server between calls: the CPU idles, so each call starts with cold caches.
            f"call_after_{IDLE_S * 1000:g}ms_idle": measure(
                _cycling(volcano, "predicate", bodies), runs=PACED_RUNS, warmup=20, pause_s=IDLE_S
            ),
            "decode_only": measure(_decoding(vw.PredicateArgs, bodies), runs=len(bodies), warmup=50),
            "decode_without_task_pod": measure(_decoding(_PredicateNoPod, bodies), runs=len(bodies), warmup=50),
        }
    for variant in ("realistic", "compact"):
        body = b["prioritize"][variant]["single"]
        answer = msgspec.json.decode(volcano.call("prioritize", body).body)
        if answer["errorMessage"] or len(answer["nodeScore"]) != len(b["realistic"]):
            raise RuntimeError(f"prioritize in-process: {answer['errorMessage']!r}")
        out[f"prioritize_{variant}_single"] = {
            "body_mb": round(len(body) / 1e6, 1),
            "call": measure(_cycling(volcano, "prioritize", [body]), runs=IN_PROCESS_PRIORITIZE_RUNS, warmup=1),
            # What decoding the whole body into PrioritizeArgs costs (the verb's general path).
            "full_decode_PrioritizeArgs": measure(
                _decoding(vw.PrioritizeArgs, [body]), runs=IN_PROCESS_PRIORITIZE_RUNS, warmup=1
            ),
        }
    body = b["prioritize"]["realistic"]["gang"]
    out["prioritize_realistic_gang"] = {
        "call": measure(_cycling(volcano, "prioritize", [body]), runs=IN_PROCESS_PRIORITIZE_RUNS, warmup=1)
    }
    # The same call with NodeInfos of a name alone: scoring and the answer, with next to nothing to read.
    nodes = msgspec.json.decode(b["prioritize"]["compact"]["single"], type=vw.PrioritizeArgs).nodes or []
    names_only = prioritize_body(b["tasks"]["single"], [vp.to_go_json({"Name": n.name}) for n in nodes])
    out["prioritize_names_only_single"] = {
        "body_mb": round(len(names_only) / 1e6, 2),
        "call": measure(_cycling(volcano, "prioritize", [names_only]), runs=200, warmup=10),
        "full_decode_PrioritizeArgs": measure(_decoding(vw.PrioritizeArgs, [names_only]), runs=200, warmup=10),
    }
    out["decode_task_only"] = measure(_decoding(vw.TaskInfo, [b["tasks"]["single"]]), runs=2000, warmup=50)
    out["queueOverused"] = measure(_cycling(volcano, "queueOverused", b["queues"]), runs=VERB_RUNS, warmup=20)
    out["reclaimable"] = measure(_cycling(volcano, "reclaimable", [b["reclaim"]]), runs=VERB_RUNS, warmup=20)
    pairs = cycle(b["allocate_pairs"])

    def allocate_pair() -> None:
        alloc, dealloc = next(pairs)
        volcano.call("allocateFunc", alloc)
        volcano.call("deallocateFunc", dealloc)

    out["allocateFunc_plus_deallocateFunc"] = measure(allocate_pair, runs=VERB_RUNS, warmup=20)
    out["jobEnqueueable"] = measure(_cycling(volcano, "jobEnqueueable", b["enqueue"]), runs=VERB_RUNS, warmup=20)
    return out


# ---------------------------------------------------------------------------------------------- main


def main() -> Json:
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    speed_before = machine_speed()
    rng = random.Random(29)
    nodes, bound = fleet_objects()
    names = [n["metadata"]["name"] for n in nodes]
    used: dict[str, int] = {}
    for p in bound:
        node_name = p["spec"]["nodeName"]
        used[node_name] = used.get(node_name, 0) + int(p["spec"]["containers"][0]["resources"]["requests"][GPU])
    full = [n for n in names if used.get(n, 0) >= GPUS]
    rng.shuffle(full)
    t0 = time.perf_counter()
    realistic, compact = node_infos(nodes, used)
    build_s = time.perf_counter() - t0
    jobs_by_role = session_jobs(full)
    jobs = [j for role in jobs_by_role.values() for j in role]
    tasks_total = sum(len(j["Tasks"]) for j in jobs)

    single_job = jobs_by_role["research_inqueue_single"][0]
    gang_job = jobs_by_role["research_inqueue_gang"][0]
    tasks = {"single": vp.to_go_json(_first_task(single_job)), "gang": vp.to_go_json(_first_task(gang_job))}
    subset = sorted(rng.sample(range(len(nodes)), SESSION_NODES))
    session = session_body(jobs, [(names[i], realistic[i]) for i in subset])
    session_all = session_body(jobs, list(zip(names, realistic, strict=True)))
    enqueue_first = vp.to_go_json(vp.job_args(jobs_by_role["training_pending_gang"][0]))
    # Quota verbs: reclaim by research's enqueued-once-reclaimed gang over 20 tasks of training's running gangs.
    evictees = [t for j in jobs_by_role["training_running"][:3] for t in j["Tasks"].values()][:20]
    reclaim = vp.to_go_json(vp.evict_args(_first_task(jobs_by_role["research_reclaiming"][0]), evictees))
    queues = [vp.to_go_json(vp.queue_args(q)) for q in queue_infos()]
    pending = [
        *jobs_by_role["training_pending_single"],
        *jobs_by_role["training_pending_gang"],
        *jobs_by_role["research_pending_single"],
        *jobs_by_role["research_pending_gang"],
    ]
    rng.shuffle(pending)
    enqueue = [vp.to_go_json(vp.job_args(j)) for j in pending]
    idle_nodes = [n for n in names if used.get(n, 0) == 0]
    allocate_pairs = []
    for k, job in enumerate(jobs_by_role["research_inqueue_single"]):
        for node in idle_nodes[100 + 10 * k : 110 + 10 * k]:
            task = _first_task(job)
            alloc = dict(task, NodeName=node, Status=vp.ALLOCATED)
            alloc["Pod"] = dict(task["Pod"], spec=dict(task["Pod"]["spec"], nodeName=node))
            dealloc = dict(alloc, Status=vp.PENDING)
            allocate_pairs.append((vp.to_go_json(vp.task_args(alloc)), vp.to_go_json(vp.task_args(dealloc))))
    order = list(range(len(nodes)))
    rng.shuffle(order)

    results: Json = {
        "fleet": {
            "platform": "GB200-NVL72",
            "racks": RACKS,
            "nodes": len(nodes),
            "gpus": GPUS * len(nodes),
            "bound_pods": len(bound),
            "used_gpus": sum(used.values()),
            "nodes_full": len(full),
            "nodes_idle": len(idle_nodes),
        },
        "volcano_version_shape": VERSION,
        "quota": {
            "cohort": COHORT,
            "flavor": FLAVOR,
            "cluster_queues_gpu_nominal": NOMINAL,
            "volcano_queues": {
                TRAINING_QUEUE: f"bound to ClusterQueue {TRAINING_CQ} by annotation {CQ_ANNOTATION}",
                RESEARCH_QUEUE: f"bound to ClusterQueue {RESEARCH_CQ} by name",
            },
        },
        "session": {
            "jobs": len(jobs),
            "tasks": tasks_total,
            "jobs_by_role": {role: len(js) for role, js in jobs_by_role.items()},
        },
        "node_info_bytes_mean": {
            "realistic": round(sum(map(len, realistic)) / len(realistic)),
            "compact": round(sum(map(len, compact)) / len(compact)),
        },
        "node_infos_build_s": round(build_s, 1),
        "task_bytes": {k: len(v) for k, v in tasks.items()},
        "targets_ms": TARGETS_MS,
    }
    with tempfile.TemporaryDirectory(prefix="kilter-bench-") as tmp:
        snapshot = Path(tmp) / "snapshot.json"
        write_snapshot(snapshot, [*nodes, *bound, fleetgen.topology_object(), *quota_objects()])
        results["fleet"]["snapshot_bytes"] = snapshot.stat().st_size
        del nodes, bound
        with server_process(serve_http, (str(snapshot), "httptools", "uvloop")) as (port, pid, ready_s):
            results["server_ready_s"] = round(ready_s, 2)
            results["onSessionOpen"] = {
                f"all_{len(names)}_nodes": session_run(
                    port, pid, session_all, enqueue_first, runs=SESSION_ALL_NODES_RUNS
                ),
                f"{SESSION_NODES}_nodes": session_run(port, pid, session, enqueue_first, runs=SESSION_RUNS),
            }
            predicate: Json = {}
            passed: dict[str, list[int]] = {}
            for kind in ("single", "gang"):
                row: Json = {"first_call": first_predicate(port, tasks[kind], realistic[order[0]])}
                row["one_connection"] = quiet(partial(predicate_run, port, pid, tasks[kind], realistic, order))
                passed[kind] = row["one_connection"].pop("_passed")
                row[f"{THREADS}_connections"] = predicate_concurrent(port, pid, tasks[kind], realistic, order)
                predicate[kind] = row
            results["predicate"] = predicate
            prioritize_bodies = {
                variant: {kind: prioritize_body(tasks[kind], infos) for kind in tasks}
                for variant, infos in (("realistic", realistic), ("compact", compact))
            }
            prioritize: Json = {"realistic": {}, "compact": {}}
            for kind in tasks:
                prioritize["realistic"][kind] = quiet(
                    partial(prioritize_run, port, pid, prioritize_bodies["realistic"][kind], len(names))
                )
            for kind in tasks:
                prioritize["compact"][kind] = prioritize_run(port, pid, prioritize_bodies["compact"][kind], len(names))
            fits = passed["single"]
            prioritize["realistic_nodes_passing_predicate_single"] = prioritize_run(
                port, pid, prioritize_body(tasks["single"], [realistic[i] for i in fits]), len(fits)
            )
            results["prioritize"] = prioritize
            results["other_verbs"] = {
                "queueOverused": verb_run(port, pid, [("queueOverused", q) for q in queues], runs=VERB_RUNS),
                "reclaimable_20_evictees": verb_run(port, pid, [("reclaimable", reclaim)], runs=VERB_RUNS),
                "allocateFunc_deallocateFunc": verb_run(
                    port,
                    pid,
                    [c for a, d in allocate_pairs for c in (("allocateFunc", a), ("deallocateFunc", d))],
                    runs=2 * VERB_RUNS,
                ),
                "jobEnqueueable": verb_run(port, pid, [("jobEnqueueable", e) for e in enqueue], runs=VERB_RUNS),
            }
        bodies = {
            "session": session,
            "enqueue_first": enqueue_first,
            "tasks": tasks,
            "realistic": [realistic[i] for i in order],
            "prioritize": prioritize_bodies,
            "queues": queues,
            "reclaim": reclaim,
            "allocate_pairs": allocate_pairs,
            "enqueue": enqueue,
        }
        results["in_process"] = in_process(snapshot, bodies)
    results["where_the_time_goes"] = where_the_time_goes(results)
    pred = results["predicate"]
    prio = results["prioritize"]["realistic"]
    measured = {
        "predicate_server_p99": max(pred[k]["one_connection"]["server"]["p99_ms"] for k in tasks),
        "predicate_4_connections_server_p99": max(pred[k][f"{THREADS}_connections"]["server"]["p99_ms"] for k in tasks),
        "prioritize_5004_realistic_server_p99": max(prio[k]["server"]["p99_ms"] for k in tasks),
    }
    results["targets_measured_ms"] = measured
    results["targets_met"] = {key: measured[key] <= target for key, target in TARGETS_MS.items()}
    runs = [
        *(s for s in results["onSessionOpen"].values()),
        *(pred[k][c] for k in tasks for c in ("one_connection", f"{THREADS}_connections")),
        *(results["prioritize"][v][k] for v in ("realistic", "compact") for k in tasks),
        *(v["host"] for v in results["other_verbs"].values()),
    ]
    results["host_during_load_runs"] = {
        "steal_fraction_max": max(r["steal_fraction"] for r in runs),
        "steal_fraction_by_run": [r["steal_fraction"] for r in runs],
        "cpu_pressure_some_fraction_max": max(r["cpu_pressure_some_fraction"] for r in runs),
    }
    results["targets_judged_on_quiet_host"] = all(
        r["steal_fraction"] <= QUIET_STEAL
        for r in (*(pred[k]["one_connection"] for k in tasks), *(prio[k] for k in tasks))
    )
    results["load_average_1m"] = {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)}
    results["reference_loop_us"] = {"before": speed_before, "after": machine_speed()}
    results["runtime_s"] = round(time.perf_counter() - started, 1)
    return results


def where_the_time_goes(results: Json) -> Json:
    """p50s side by side: round trip, server app, kilter in-process, and the part of that spent decoding."""
    ip = results["in_process"]
    out: Json = {}
    for kind in ("single", "gang"):
        one = results["predicate"][kind]["one_connection"]
        row = ip[f"predicate_{kind}"]
        decode = row["decode_only"]["p50_us"]
        out[f"predicate_{kind}_us"] = {
            "round_trip_p50": round(one["round_trip"]["p50_ms"] * 1000, 1),
            "server_app_p50": round(one["server"]["p50_ms"] * 1000, 1),
            "in_process_call_p50": row["call"]["p50_us"],
            f"in_process_call_after_{IDLE_S * 1000:g}ms_idle_p50": row[f"call_after_{IDLE_S * 1000:g}ms_idle"][
                "p50_us"
            ],
            "of_which_decode_p50": decode,
            "of_which_decoding_the_task_pod_p50": round(decode - row["decode_without_task_pod"]["p50_us"], 1),
        }
    names = ip["prioritize_names_only_single"]
    names_call_ms = names["call"]["p50_us"] / 1000
    for variant in ("realistic", "compact"):
        http = results["prioritize"][variant]["single"]
        row = ip[f"prioritize_{variant}_single"]
        call_ms = row["call"]["p50_us"] / 1000
        out[f"prioritize_{variant}_single_ms"] = {
            "body_mb": http["body_mb"],
            "round_trip_p50": http["round_trip"]["p50_ms"],
            "server_app_p50": http["server"]["p50_ms"],
            "in_process_call_p50": round(call_ms, 2),
            "of_which_reading_the_body_p50": round(call_ms - names_call_ms, 2),
            "of_which_scoring_and_answer_p50": round(names_call_ms, 2),
            "full_decode_PrioritizeArgs_p50": round(row["full_decode_PrioritizeArgs"]["p50_us"] / 1000, 2),
        }
    sessions = results["onSessionOpen"]
    http = sessions[f"{SESSION_NODES}_nodes"]
    row = ip["onSessionOpen"]
    out[f"onSessionOpen_{SESSION_NODES}_nodes_ms"] = {
        "body_mb": http["body_mb"],
        "round_trip_p50": http["round_trip"]["p50_ms"],
        "server_app_p50": http["server"]["p50_ms"],
        "in_process_call_p50": round(row["call"]["p50_us"] / 1000, 1),
        "decode_only_p50": round(row["decode_only"]["p50_us"] / 1000, 1),
        "decode_without_nodes_and_task_pods_p50": round(row["decode_without_nodes_and_task_pods"]["p50_us"] / 1000, 1),
        "first_quota_verb_after_open_server_p50": http["first_quota_verb_after_open"]["server"]["p50_ms"],
    }
    return out


if __name__ == "__main__":
    print(write("volcano", main()))

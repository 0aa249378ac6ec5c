"""The gRPC placement API under load: ``kilter serve``'s gRPC listener on the 5,004-node GB200 fleet.

Targets (issue #19): Plan p99 <= 3 ms at 5,004 nodes; Inventory <= 5 ms;
WatchDecisions keeps up with 5,000 decisions a second. The server runs in a
process of its own (the extender bench's fleet, as a snapshot), with its
HTTP app, gang book and decision feed wired as ``kilter serve`` wires them;
the client is a grpcio stub on one channel, as a peer or a dashboard holds
one. Plan's job is sent as JSON, as a program sends it ("plan"), and as
YAML, as a person's manifest is ("plan_yaml"). Inventory is timed on an
unchanged state (the servicer gives its last answer again) and on a state
that changes every millisecond (each answer taken afresh). Plan and
Inventory are timed round trip (client to answer decoded) and
by kilter's own account (the ``server-timing`` trailer: from the call's
arrival in the servicer to its answer built), and in process without gRPC
(``planning.plan_object``, a fresh ``inventory.take``, the message mapping),
so the transport's share shows.

WatchDecisions: the server publishes into its real feed at a fixed rate
(``RATES``, in 1 ms ticks) for ``STREAM_S`` seconds once the client has
subscribed, then an end marker; the client counts what arrives and what it
was told it missed (``Dropped``). Keeping up means nothing dropped and the
arrival rate equal to the publishing rate. A burst (everything published at
once, the feed's limit raised to hold it) gives the stream's ceiling.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import uvloop
import yaml

from bench.common import machine_speed, measure
from bench.extender import GPU_TAINT, RACKS, fleet_objects, write_snapshot
from bench.server import serve_config
from kilter.api import messages
from kilter.api import placement_pb2 as pb
from kilter.api import placement_pb2_grpc as pb_grpc
from kilter.cli import serve, serve_grpc
from kilter.cli.demo import DEMO_JOBS
from kilter.gangs import inventory, planning
from kilter.gangs.decisions import Decision, DecisionFeed
from kilter.gangs.waits import Waits
from kilter.model.jobs import read_job
from kilter.state.feed import settle
from kilter.state.store import ClusterStore
from kilter.topology.split_wait import SplitWait

TARGETS = {"plan_p99_ms": 3.0, "inventory_p99_ms": 5.0, "watch_decisions_per_s": 5000}
PLAN_RUNS, PLAN_WARMUP = 1000, 50
INVENTORY_RUNS, INVENTORY_WARMUP = 300, 20
RATES = (5_000, 10_000, 20_000)
STREAM_S = 3.0
BURST = 100_000
END = "end-of-bench"


# ---------------------------------------------------------------------------------------------- server


async def _publish(decisions: DecisionFeed, rate: int, seconds: float) -> None:
    """Once someone subscribes: ``rate`` decisions a second in 1 ms ticks for ``seconds`` (0: all of ``BURST`` at
    once), then the end marker."""
    while not decisions.watched:
        await asyncio.sleep(0.01)
    if seconds == 0:
        for i in range(BURST):
            decisions.publish(Decision(time.time(), "scheduler", "filter", "pod", "ml", f"p{i}", "fits", "burst"))
    else:
        start, sent, n = time.perf_counter(), 0, int(rate * seconds)
        while sent < n:
            due = min(n, int((time.perf_counter() - start) * rate) + 1)
            for i in range(sent, due):
                decisions.publish(Decision(time.time(), "scheduler", "filter", "pod", "ml", f"p{i}", "fits", "paced"))
            sent = due
            await asyncio.sleep(0.001)
    decisions.publish(Decision(time.time(), "scheduler", END, "pod", "ml", END, "", ""))


async def _churn(store: ClusterStore) -> None:
    """A busy cluster: a GPU booked and freed again every millisecond on the loop, so that no two Inventory calls
    see the same usage and each is taken afresh (the servicer reuses its last answer only for an unchanged one)."""
    node = store.fleet().node_names[0]
    while True:
        store.assume("bench-churn", node, 1)
        await asyncio.sleep(0.001)
        store.forget("bench-churn")
        await asyncio.sleep(0.001)


def serve_grpc_child(snapshot: str, rate: int, seconds: float, churn: bool, port_out: Connection) -> None:
    """Child process: ``kilter serve --snapshot`` with its gRPC listener on an ephemeral port, and a publisher (or,
    with ``churn``, a state that changes every millisecond)."""
    config = serve_config(Path(snapshot))
    app, store = serve.build_app(config)
    settle()
    store.fleet()
    placement = serve_grpc.placement_server(config, app, store, port=0)
    assert placement is not None and app.extender.log.feed is not None
    placement.address = "127.0.0.1"
    decisions = app.extender.log.feed

    if rate and seconds == 0:
        decisions.limit = BURST + 1  # a burst is held whole: the subscriber's queue is sized when it subscribes

    async def main() -> None:
        port_out.send(await placement.start())
        port_out.close()
        if rate:
            await _publish(decisions, rate, seconds)
        changing = asyncio.create_task(_churn(store)) if churn else None
        await placement.wait()
        if changing is not None:
            changing.cancel()

    uvloop.run(main())


class Child:
    def __init__(self, snapshot: Path, rate: int = 0, seconds: float = 0.0, *, churn: bool = False) -> None:
        ctx = multiprocessing.get_context("spawn")
        port_in, port_out = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(
            target=serve_grpc_child, args=(str(snapshot), rate, seconds, churn, port_out), daemon=True
        )
        self.proc.start()
        port_out.close()
        if not port_in.poll(300):
            raise RuntimeError("the server process did not report its port")
        self.port: int = port_in.recv()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        grpc.channel_ready_future(self.channel).result(timeout=60)
        self.stub = pb_grpc.PlacementStub(self.channel)

    def close(self) -> None:
        self.channel.close()
        self.proc.terminate()
        self.proc.join(15)


# ---------------------------------------------------------------------------------------------- client


def timed(call: Any, request: Any, *, runs: int, warmup: int) -> dict[str, Any]:
    """Round trip (client to answer decoded) and kilter's own share (the ``server-timing`` trailer), in ms."""
    for _ in range(warmup):
        call.with_call(request)
    trip = np.empty(runs)
    server = np.empty(runs)
    clock = time.perf_counter_ns
    for i in range(runs):
        t0 = clock()
        _, c = call.with_call(request)
        trip[i] = (clock() - t0) / 1e6
        server[i] = float(dict(c.trailing_metadata())["server-timing"].removeprefix("dur="))

    def stats(a: np.ndarray) -> dict[str, float]:
        p50, p99 = np.percentile(a, [50, 99])
        return {"p50_ms": round(float(p50), 3), "p99_ms": round(float(p99), 3), "mean_ms": round(float(a.mean()), 3)}

    return {"n": runs, "round_trip": stats(trip), "server": stats(server)}


def _ms(stats: dict[str, float]) -> dict[str, float]:
    return {k.replace("_us", "_ms"): round(v / 1000, 3) if k.endswith("_us") else v for k, v in stats.items()}


def _watch(stub: pb_grpc.PlacementStub, published: int) -> dict[str, Any]:
    """Read until the end marker, or until every published decision arrived or was reported missed (the end
    marker itself may be among the missed)."""
    received = dropped = 0
    first = last = 0.0
    for message in stub.WatchDecisions(pb.WatchRequest(), timeout=STREAM_S + 120):
        if received + dropped >= published + 1:
            break
        now = time.perf_counter()
        if message.WhichOneof("event") == "dropped":
            dropped += message.dropped.count
            continue
        if message.decision.verb == END:
            break
        if not received:
            first = now
        received += 1
        last = now
    span = last - first
    return {"received": received, "dropped": dropped, "per_s": round(received / span) if span > 0 else None}


def in_process(snapshot: Path, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """The servicer's own work on the same fleet, without the network: plan dict + message, and an inventory taken
    afresh + its message (what an Inventory costs after each change of the state)."""
    _, store = serve.build_app(serve_config(snapshot))
    settle()
    fleet = store.fleet()
    now = time.time()
    waits = Waits.of_state(store.state(), SplitWait(), now_s=now)
    job = jobs[0]
    spec = read_job(job)

    def plan() -> bytes:
        d = planning.plan_object(fleet, job, spec, waits, now_s=now, keep=False)
        return messages.plan_response(d).SerializeToString()

    def inv() -> bytes:
        return messages.inventory(inventory.take(store)).SerializeToString()

    return {
        "plan": _ms(measure(plan, runs=PLAN_RUNS, warmup=PLAN_WARMUP)),
        "inventory": _ms(measure(inv, runs=INVENTORY_RUNS, warmup=INVENTORY_WARMUP)),
        "inventory_bytes": len(inv()),
    }


def _tolerating(obj: Any) -> Any:
    """``obj`` with every pod template tolerating the fleet's ``nvidia.com/gpu`` taint, as GPU jobs do."""
    if isinstance(obj, list):
        return [_tolerating(x) for x in obj]
    if not isinstance(obj, dict):
        return obj
    out = {k: _tolerating(v) for k, v in obj.items()}
    spec = out.get("spec")
    if isinstance(spec, dict) and "containers" in spec:
        spec["tolerations"] = [{"key": GPU_TAINT["key"], "operator": "Exists", "effect": GPU_TAINT["effect"]}]
    return out


def main() -> dict[str, Any]:
    speed_before = machine_speed()
    nodes, bound = fleet_objects()
    jobs = [_tolerating(d) for d in yaml.safe_load_all(DEMO_JOBS.read_text()) if d]
    results: dict[str, Any] = {
        "fleet": {
            "nodes": len(nodes),
            "gpus": 4 * len(nodes),
            "bound_pods": len(bound),
            "racks": RACKS,
        },
        "targets": TARGETS,
        "plan_job": f"{jobs[0]['kind']} {jobs[0]['metadata']['name']}",
    }
    with tempfile.TemporaryDirectory(prefix="kilter-bench-") as tmp:
        snapshot = Path(tmp) / "snapshot.json"
        write_snapshot(snapshot, nodes, bound)
        child = Child(snapshot)
        try:
            stub = child.stub
            # A program sends JSON; a person's manifest is YAML, which costs its parse (~0.25 ms more) on top.
            bodies = [json.dumps(job).encode() for job in jobs]
            request = pb.PlanRequest(job=bodies[0])
            results["plan"] = timed(stub.Plan, request, runs=PLAN_RUNS, warmup=PLAN_WARMUP)
            as_yaml = pb.PlanRequest(job=yaml.safe_dump(jobs[0]).encode())
            results["plan_yaml"] = timed(stub.Plan, as_yaml, runs=PLAN_RUNS, warmup=PLAN_WARMUP)
            by_kind = {}
            for job, body in zip(jobs, bodies, strict=True):
                each = pb.PlanRequest(job=body)
                answer = stub.Plan(each)
                by_kind[str(job["kind"])] = {
                    "feasible": answer.feasible,
                    "reason": answer.reason,
                    **timed(stub.Plan, each, runs=200, warmup=20),
                }
            results["plan_by_kind"] = by_kind
            empty = pb.InventoryRequest()
            # the same state each time: the servicer's last answer, given again (see servicer.Inventory); an
            # answer taken afresh after a change is ``in_process.inventory`` plus the transport
            results["inventory_unchanged_state"] = timed(
                stub.Inventory, empty, runs=INVENTORY_RUNS, warmup=INVENTORY_WARMUP
            )
        finally:
            child.close()
        child = Child(snapshot, churn=True)
        try:
            results["inventory_changing_state"] = timed(
                child.stub.Inventory, pb.InventoryRequest(), runs=INVENTORY_RUNS, warmup=INVENTORY_WARMUP
            )
        finally:
            child.close()
        results["in_process"] = in_process(snapshot, jobs)
        stream: dict[str, Any] = {}
        for rate in RATES:
            child = Child(snapshot, rate, STREAM_S)
            try:
                n = int(rate * STREAM_S)
                stream[f"paced_{rate}_per_s"] = {"published": n, **_watch(child.stub, n)}
            finally:
                child.close()
        child = Child(snapshot, BURST, 0.0)
        try:
            stream["burst"] = {"published": BURST, **_watch(child.stub, BURST)}
        finally:
            child.close()
        results["watch_decisions"] = stream
    results["machine_speed_us"] = {"before": speed_before, "after": machine_speed()}
    results["load_avg_1m"] = os.getloadavg()[0]
    return results

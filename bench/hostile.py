"""How long hostile requests hold a real ``kilter serve``: the soak's bodies, timed from the client (issue #17).

The soak test (``tests/test_hostile_soak.py``) asserts no 5xx, no hang and
no leak, with a generous hang detector and no clock; this benchmark reports
how long each answer took, per endpoint family, so the "answered within 1 s"
target is a measured figure in ``bench/results/hostile.json``: n, p50, p99
and the slowest answer with the body that caused it. It runs the soak's
bodies under the soak's small limits, then the worst ``/scheduler/filter``
body the default 8 MiB limit admits (node names kilter does not know, as
many as fit), which is the most a caller on loopback can make one request
cost. Then a flood of idle connections to the gRPC port (``hostile_grpc``) and
hostile pool peers (``hostile_pool``): what they hold and how long they stall
the event loop.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import numpy as np

from bench.common import machine_speed
from bench.hostile_grpc import grpc_flood
from bench.hostile_pool import pool_probe
from kilter.cli.serve_config import DEFAULTS
from tests.extenders.conftest import pod_json
from tests.test_hostile_soak import (
    REVIEW_LIMIT,
    SCHEDULER_LIMIT,
    VOLCANO_LIMIT,
    Kilter,
    hostile,
    review_bodies,
    running_kilter,
    scheduler_bodies,
    volcano_bodies,
)

__all__ = ["main"]


def limits_argv(scheduler_bytes: int) -> list[str]:
    """The body-limit flags of a run: ``scheduler_bytes`` on /scheduler/*, the soak's limit on /volcano/*."""
    return ["--max-body-bytes", str(scheduler_bytes), "--volcano-max-body-bytes", str(VOLCANO_LIMIT)]


def timed(request: Callable[..., int], *args: Any, **kwargs: Any) -> tuple[float, int]:
    """Milliseconds from sending a request to its whole answer read, and the answer's status."""
    started = time.perf_counter()
    status = request(*args, **kwargs)
    return (time.perf_counter() - started) * 1000.0, status


def summary(samples: list[tuple[float, int, str]]) -> dict[str, Any]:
    """n, p50, p99 and max in milliseconds, the statuses seen, and which body was slowest."""
    ms = np.array([s[0] for s in samples])
    slowest = max(samples, key=lambda s: s[0])
    return {
        "n": len(samples),
        "p50_ms": round(float(np.percentile(ms, 50)), 2),
        "p99_ms": round(float(np.percentile(ms, 99)), 2),
        "max_ms": round(slowest[0], 2),
        "slowest": slowest[2],
        "statuses": sorted({s[1] for s in samples}),
    }


def families(kilter: Kilter) -> dict[str, dict[str, Any]]:
    """Every hostile body of the soak, per endpoint family, timed from the client."""
    out: dict[str, list[tuple[float, int, str]]] = {"scheduler": [], "volcano": [], "webhooks": []}
    for verb, valid in scheduler_bodies().items():
        for i, body in enumerate(hostile(valid, SCHEDULER_LIMIT)):
            ms, status = timed(kilter.request, "POST", f"/scheduler/{verb}", body)
            out["scheduler"].append((ms, status, f"{verb} #{i} ({len(body)} bytes)"))
    for verb, valid in volcano_bodies().items():
        limit = VOLCANO_LIMIT if verb in ("onSessionOpen", "prioritize") else 64 * 1024
        for i, body in enumerate(hostile(valid, limit)):
            ms, status = timed(kilter.request, "POST", f"/volcano/{verb}", body)
            out["volcano"].append((ms, status, f"{verb} #{i} ({len(body)} bytes)"))
    for path in ("/mutate", "/validate"):
        for name, valid in review_bodies().items():
            for i, body in enumerate(hostile(valid, 256 * 1024)):
                ms, status = timed(kilter.request, "POST", path, body, webhook=True)
                out["webhooks"].append((ms, status, f"{path} {name} #{i} ({len(body)} bytes)"))
    return {family: summary(samples) for family, samples in out.items()}


def worst_filter_body(limit: int) -> bytes:
    """A filter naming as many unknown nodes as ``limit`` admits: the most a NodeNames body can ask of kilter."""
    head = json.dumps({"Pod": pod_json("p", 4), "Nodes": None, "NodeNames": []}).encode()[:-2]
    name_bytes = len(b',"unknown-node-0000000"')
    count = (limit - len(head) - 8) // name_bytes
    names = b",".join(b'"unknown-node-%07d"' % i for i in range(count))
    return head + names + b"]}"


def main() -> dict[str, Any]:
    speed_before = machine_speed()
    limits = {"scheduler": SCHEDULER_LIMIT, "volcano": VOLCANO_LIMIT, "review": REVIEW_LIMIT}
    results: dict[str, Any] = {"limits": limits}
    with TemporaryDirectory() as tmp:
        with running_kilter(Path(tmp), limits_argv(SCHEDULER_LIMIT)) as kilter:
            start_rss = kilter.rss_mib()
            results["families"] = families(kilter)
            results["rss_mib"] = {"start": round(start_rss, 1), "end": round(kilter.rss_mib(), 1)}
        body = worst_filter_body(DEFAULTS.max_body_bytes)
        sub = Path(tmp) / "default-limits"
        sub.mkdir()
        with running_kilter(sub, limits_argv(DEFAULTS.max_body_bytes)) as kilter:
            samples = [timed(kilter.request, "POST", "/scheduler/filter", body) for _ in range(5)]
            health = [timed(kilter.request, "GET", "/healthz") for _ in range(3)]
        results["worst_filter_at_default_limit"] = {
            "body_bytes": len(body),
            "unknown_names": body.count(b'"unknown-node-'),
            "ms": [round(ms, 1) for ms, _ in samples],
            "statuses": sorted({status for _, status in samples}),
            "healthz_after_ms": [round(ms, 2) for ms, _ in health],
        }
    results["grpc_flood"] = grpc_flood()
    results["pool"] = pool_probe()
    results["machine_speed_us"] = {"before": speed_before, "after": machine_speed()}
    return results

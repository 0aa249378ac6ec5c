"""``make dashboard``: docs/operations-dashboard.png, kilter's dashboard drawn from a real kilter serve's metrics.

``kilter demo``'s scheduler stand-in places the demo trace's jobs through a
``kilter serve`` on 127.0.0.1 (``demo_scheduler``: filter, prioritize, bind
over HTTP), and every ``EVERY`` extender calls this scrapes that server's
``/metrics`` registry. The panels are the Grafana dashboard's
(config/components/monitoring/dashboard.json) that the demo feeds: request
rate and p99 latency by verb (rates between scrapes; the quantile from the
histogram's buckets, as ``histogram_quantile`` takes it), plans by outcome,
plans open, and errors. The x axis is the demo's own wall-clock seconds.
Not a benchmark (its figures depend on the machine): nothing is written to
bench/results.
"""

from __future__ import annotations

import itertools
import json
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kilter.cli import simulate_inputs
from kilter.cli.demo_compare import DEMO_GPU_SCALE, DEMO_JOBS, demo_objects
from kilter.cli.demo_scheduler import ExtenderPlacement, ExtenderServer
from kilter.cli.sources import DEMO_QUEUES
from kilter.sim import fleetspec, run
from kilter.sim.engine import SimConfig
from kilter.state import snapshot

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "operations-dashboard.png"
EVERY = 100  # extender calls between scrapes


@dataclass
class Scrape:
    at_s: float
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]

    def value(self, name: str, **labels: str) -> float:
        return sum(v for (n, ls), v in self.samples.items() if n == name and labels.items() <= dict(ls).items())

    def labels(self, name: str, key: str) -> set[str]:
        return {dict(ls)[key] for (n, ls) in self.samples if n == name and key in dict(ls)}


def scrape(server: ExtenderServer, started: float) -> Scrape:
    text = generate_latest(server.app.metrics.registry).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    return Scrape(time.perf_counter() - started, samples)


def quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """``histogram_quantile``: linear within the bucket the rank falls in; None without observations."""
    buckets = sorted(buckets)
    total = buckets[-1][1] if buckets else 0.0
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * ((rank - below) / (count - below) if count > below else 0.0)
        lower, below = bound, count
    return lower


def series(scrapes: list[Scrape]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """Panel -> legend -> (seconds, value), computed between consecutive scrapes."""
    out: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    duration = "kilter_extender_request_duration_seconds"
    for before, after in itertools.pairwise(scrapes):
        dt = after.at_s - before.at_s
        if dt <= 0:
            continue
        t = after.at_s
        for verb in sorted(after.labels(f"{duration}_count", "verb")):
            calls = after.value(f"{duration}_count", verb=verb) - before.value(f"{duration}_count", verb=verb)
            out["Extender requests by verb (per second)"][verb].append((t, calls / dt))
            bounds = after.labels(f"{duration}_bucket", "le")
            buckets = [
                (
                    float(b),
                    after.value(f"{duration}_bucket", verb=verb, le=b)
                    - before.value(f"{duration}_bucket", verb=verb, le=b),
                )
                for b in bounds
            ]
            p99 = quantile(0.99, buckets)
            if p99 is not None:
                out["Extender latency p99 by verb (ms)"][verb].append((t, p99 * 1000))
        for outcome in sorted(after.labels("kilter_gang_plans_total", "outcome")):
            made = after.value("kilter_gang_plans_total", outcome=outcome) - before.value(
                "kilter_gang_plans_total", outcome=outcome
            )
            out["Gang plans by outcome (per second)"][outcome].append((t, made / dt))
        out["Gang plans open"]["open"].append((t, after.value("kilter_gang_plans_open")))
        errors = sum(
            after.value("kilter_extender_requests_total", code=c)
            - before.value("kilter_extender_requests_total", code=c)
            for c in after.labels("kilter_extender_requests_total", "code")
            if not c.startswith("2")
        )
        internal = after.value("kilter_internal_errors_total") - before.value("kilter_internal_errors_total")
        out["Errors (per second)"]["non-2xx"].append((t, errors / dt))
        out["Errors (per second)"]["internal"].append((t, internal / dt))
    return out


def render(panels: dict[str, dict[str, list[tuple[float, float]]]], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(panels)
    fig, axes = plt.subplots(len(names) // 2 + len(names) % 2, 2, figsize=(13, 3.0 * ((len(names) + 1) // 2)))
    flat = list(axes.flat)
    for ax, name in zip(flat, names, strict=False):
        for legend, points in sorted(panels[name].items()):
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, label=legend, linewidth=1.2)
        ax.set_title(name, fontsize=10, loc="left")
        ax.set_xlabel("seconds into the demo", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    for ax in flat[len(names) :]:
        ax.axis("off")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(out: Path = OUT, jobs: int = DEMO_JOBS) -> dict[str, Any]:
    trace_jobs = simulate_inputs.load_jobs(
        "synthetic:philly", gpu_scale=DEMO_GPU_SCALE, time_scale=1.0, limit=jobs, seed=0
    )
    objects = demo_objects()
    scrapes: list[Scrape] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "demo-fleet.json"
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
        with ExtenderServer(path) as server:
            started = time.perf_counter()
            calls = [0]

            def on_call() -> None:
                calls[0] += 1
                if calls[0] % EVERY == 0:
                    scrapes.append(scrape(server, started))

            scrapes.append(scrape(server, started))
            policy = ExtenderPlacement(server, on_call=on_call)
            try:
                run.simulate(
                    lambda: fleetspec.fleet_from_objects(objects),
                    trace_jobs,
                    policy,
                    queue_objects=snapshot.load_documents(DEMO_QUEUES),
                    config=SimConfig(fair=True),
                    seed=0,
                )
            finally:
                policy.close()
            scrapes.append(scrape(server, started))
    panels = series(scrapes)
    title = f"kilter serve during `kilter demo`: {len(trace_jobs)} jobs, {calls[0]:,} extender calls"
    title += f", a scrape every {EVERY}"
    render(panels, out, title)
    return {"png": str(out), "jobs": len(trace_jobs), "calls": calls[0], "scrapes": len(scrapes)}


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT), indent=2))

"""Timing and result files shared by every benchmark: seeded, warmed up, no asserts."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def measure(fn: Callable[[], object], *, runs: int, warmup: int = 5, pause_s: float = 0.0) -> dict[str, float]:
    """n, p50, p99, mean and min of ``fn`` in microseconds, after ``warmup`` untimed calls.

    ``pause_s`` puts the thread to sleep before each call, as a server idles
    between requests: each call then starts with cold caches.
    """
    for _ in range(warmup):
        if pause_s:
            time.sleep(pause_s)
        fn()
    samples = np.empty(runs, dtype=np.float64)
    clock = time.perf_counter_ns
    for i in range(runs):
        if pause_s:
            time.sleep(pause_s)
        t0 = clock()
        fn()
        samples[i] = (clock() - t0) / 1000.0
    return {
        "n": runs,
        "p50_us": round(float(np.percentile(samples, 50)), 2),
        "p99_us": round(float(np.percentile(samples, 99)), 2),
        "mean_us": round(float(samples.mean()), 2),
        "min_us": round(float(samples.min()), 2),
    }


def machine_speed() -> float:
    """p50 microseconds of a fixed pure-Python loop: this shared VM's speed drifts, so each run records it."""
    return measure(lambda: sum(range(100_000)), runs=200, warmup=10)["p50_us"]


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "kilter"], capture_output=True, text=True).stdout
        return out.stdout.strip() + ("-dirty" if dirty.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def environment() -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    for pkg in ("kilter", "numpy", "msgspec", "Cython", "pydantic"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {
        "commit": _commit(),
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpus": __import__("os").cpu_count(),
        "versions": versions,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write(name: str, results: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"benchmark": name, "environment": environment(), "results": results}, indent=2) + "\n")
    return path


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def host_counters() -> tuple[list[int], float]:
    """The machine's CPU time counters (``/proc/stat``, in ticks) and seconds some task waited for a CPU (PSI)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    try:
        some = Path("/proc/pressure/cpu").read_text().split("\n", 1)[0]
        waited = int(some.rpartition("total=")[2]) / 1e6
    except (OSError, ValueError):
        waited = float("nan")
    return ticks, waited


def host_share(before: tuple[list[int], float], after: tuple[list[int], float], wall: float) -> dict[str, float]:
    """Over a run: the CPU time the hypervisor gave elsewhere (steal) and how often a task here waited for a CPU."""
    delta = [b - a for a, b in zip(before[0], after[0], strict=True)]
    steal = delta[7] if len(delta) > 7 else 0
    return {
        "steal_fraction": round(steal / max(sum(delta), 1), 4),
        "cpu_pressure_some_fraction": round((after[1] - before[1]) / wall, 3),
    }

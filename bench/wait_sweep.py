"""Issue #39's sweep of docs/simulation.md: kilter's waiting rules against the best other policy, per job class.

Not part of ``make bench`` (about half an hour on two cores): ``python -m
bench.wait_sweep --philly philly.csv --helios helios-venus-week1.csv`` runs
every kilter variant on every fleet and split model, and the runs the
scoreboard (``bench.scoreboard``) does not hold (the Helios baselines, and
Slurm with declared estimates as its time limits), one ``kilter simulate``
each, into ``docs/sim/wait-sweep/``; ``python -m bench.wait_sweep --table``
prints the page's table from them and the scoreboard's baselines. A trace
not given skips its runs.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.scoreboard import run_one

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "sim" / "wait-sweep"
SCOREBOARD = ROOT / "docs" / "sim" / "scoreboard"
BASELINES = ("kueue-tas", "kueue-tas-balanced", "slurm", "volcano-hypernode")
MODELS = ("per-domain", "step")
# run name -> (fleet, trace: "philly", "helios" or a synthetic profile, scoreboard name of its baselines or None)
FLEETS = {
    "philly-40": ("gb200-40.yaml", "philly", "philly-40"),
    "philly-48": ("gb200-48.yaml", "philly", "philly-48"),
    "synthetic-28": ("gb200-28.yaml", "synthetic:philly", "synthetic-28"),
    "helios-34": ("helios-venus-34.yaml", "helios", None),
}
VARIANTS: dict[str, list[str]] = {
    "default": [],
    "declared": ["--runtime-estimate", "declared"],
    "told-0.1": ["--split-wait-slowdown", "0.1"],
    "told-0.4": ["--split-wait-slowdown", "0.4"],
    "reservations": ["--reservations", "on"],
    "own-price": ["--split-wait-price", "own"],
}
FIGURES = ("wait", "jct", "one", "multi", "max", "util")


def runs(traces: dict[str, Path]) -> list[tuple[str, list[str]]]:
    """(name, kilter simulate arguments) of every run whose trace is at hand."""
    out = []
    for fleet_name, (fleet, trace, scoreboard) in FLEETS.items():
        path = str(traces[trace]) if trace in traces else trace if trace.startswith("synthetic:") else None
        if path is None:
            continue
        for model in MODELS:
            base = [
                "simulate", "--fleet", f"docs/sim/{fleet}", "--trace", path, "--gpu-scale", "4",
                "--split-model", model, "--split-slowdown", "0.2", "--block-slowdown", "0.1", "-o", "json",
            ]  # fmt: skip
            for variant, extra in VARIANTS.items():
                out.append((f"kilter-{variant}-{fleet_name}-{model}", [*base, "--policy", "kilter", *extra]))
            declared = ["--runtime-estimate", "declared"]
            out.append((f"slurm-declared-{fleet_name}-{model}", [*base, "--policy", "slurm", *declared]))
            if scoreboard is None:
                out.append((f"baselines-{fleet_name}-{model}", [*base, "--policy", ",".join(BASELINES)]))
    return out


def _policies(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text())["policies"]) if path.is_file() else {}


def _figures(m: dict[str, Any]) -> dict[str, float]:
    c = m["classes"]
    return {
        "wait": m["meanWaitSeconds"],
        "jct": m["meanJctSeconds"],
        "one": c["oneDomain"]["meanWaitSeconds"],
        "multi": c["multiDomain"]["meanWaitSeconds"],
        "max": m["maxWaitSeconds"],
        "util": m["utilization"],
    }


def baselines(fleet_name: str, model: str, *, declared: bool) -> dict[str, dict[str, float]]:
    """The other policies' figures for a run: the scoreboard's (or the sweep's own for Helios), Slurm's with
    declared time limits when kilter's estimates are declared too."""
    scoreboard = FLEETS[fleet_name][2]
    if scoreboard is None:
        found = _policies(OUT / f"baselines-{fleet_name}-{model}.json")
    else:
        found = _policies(SCOREBOARD / f"{scoreboard}-{model}-0.2.json")
    others = {name: _figures(m) for name, m in found.items() if name in BASELINES}
    if declared:
        slurm = _policies(OUT / f"slurm-declared-{fleet_name}-{model}.json").get("slurm")
        if slurm is not None:
            others["slurm"] = _figures(slurm)
    return others


def _shown(key: str, value: float) -> str:
    return f"{value:.3f}" if key == "util" else f"{value:,.0f}"


def table() -> None:
    """The page's table: per run and variant, kilter's figure over the best other policy's, with both."""
    print(
        "| run | variant | mean wait | mean JCT | one-rack jobs' wait | multi-rack gangs' wait | max wait "
        "| utilization |"
    )
    print("| --- " * 8 + "|")
    for fleet_name in FLEETS:
        for model in MODELS:
            for variant in VARIANTS:
                ours = _policies(OUT / f"kilter-{variant}-{fleet_name}-{model}.json").get("kilter")
                others = baselines(fleet_name, model, declared=variant == "declared")
                if ours is None or not others:
                    continue
                mine = _figures(ours)
                cells = []
                for key in FIGURES:
                    ranked = sorted((figures[key], name) for name, figures in others.items())
                    best = ranked[-1][1] if key == "util" else ranked[0][1]
                    theirs = others[best][key]
                    ratio = f"{mine[key] / theirs:.2f}" if theirs else "–"
                    cells.append(f"{ratio} ({_shown(key, mine[key])} / {_shown(key, theirs)} {best})")
                print(f"| {fleet_name} {model} | {variant} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--philly", type=Path, help="the Philly trace (docs/simulation.md says where)")
    parser.add_argument("--helios", type=Path, help="the Helios Venus week (docs/simulation.md, A second trace)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (default 2)")
    parser.add_argument("--table", action="store_true", help="print the page's table from the stored runs")
    args = parser.parse_args()
    if args.table:
        table()
        return
    traces = {name: path for name, path in (("philly", args.philly), ("helios", args.helios)) if path is not None}
    for path in traces.values():
        if not path.is_file():
            raise SystemExit(f"no trace at {path}")
    OUT.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for line in pool.map(lambda r: run_one(r[0], r[1], OUT), runs(traces)):
            print(line, flush=True)


if __name__ == "__main__":
    main()

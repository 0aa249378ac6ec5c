"""The scoreboard of docs/simulation.md: every policy on the real Philly trace, over fleets and split models.

Not part of ``make bench`` (it runs for about an hour on two cores): run
``python -m bench.scoreboard [--trace philly.csv] [--jobs 2]`` to write one
JSON report per run into ``docs/sim/scoreboard/`` (what ``kilter simulate
-o json`` prints, plus the command), then ``python -m bench.scoreboard
--tables`` to print the Markdown tables the page shows. Runs go two at a
time, one per core; each is the ``kilter simulate`` a user would type.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "sim" / "scoreboard"
PHILLY = ROOT.parent / "shared" / "data" / "traces" / "philly" / "philly.csv"
FLEETS = {"48": ROOT / "docs" / "sim" / "gb200-48.yaml", "40": ROOT / "docs" / "sim" / "gb200-40.yaml"}
SYNTHETIC_FLEET = ROOT / "docs" / "sim" / "gb200-28.yaml"  # the synthetic profile never queues on 40 racks
# (split model, split slowdown, block slowdown): none needs no slowdown; per-domain and step at the defaults
# (0.2 and 0.1) and at 1.0 for both (a split gang runs twice as long), as the page's earlier sweeps set them.
MODELS = (
    ("none", 0.0, 0.0),
    ("per-domain", 0.2, 0.1),
    ("step", 0.2, 0.1),
    ("per-domain", 1.0, 1.0),
    ("step", 1.0, 1.0),
)


def runs(trace: Path) -> list[tuple[str, list[str]]]:
    """(name, kilter simulate arguments) of every run of the page."""
    out = []
    for racks, fleet in FLEETS.items():
        for model, split, block in MODELS:
            name = f"philly-{racks}-{model}-{split:g}"
            out.append((name, _args(fleet, str(trace), model, split, block)))
    for model, split, block in MODELS[:3]:
        name = f"synthetic-28-{model}-{split:g}"
        out.append((name, _args(SYNTHETIC_FLEET, "synthetic:philly", model, split, block)))
    return out


def _args(fleet: Path, trace: str, model: str, split: float, block: float) -> list[str]:
    return [
        "simulate", "--fleet", str(fleet.relative_to(ROOT)), "--trace", trace, "--gpu-scale", "4",
        "--policy", "all", "--split-model", model, "--split-slowdown", f"{split:g}",
        "--block-slowdown", f"{block:g}", "-o", "json",
    ]  # fmt: skip


def run_one(name: str, args: list[str], out: Path = OUT) -> str:
    """Run one ``kilter simulate`` and keep its JSON report as ``out/name.json``, with the command a reader would
    type (the trace by its file name: where it lies is this machine's business) and the wall time."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "kilter.cli", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode:
        return f"{name}: failed ({done.stderr.strip()[-300:]})"
    report = json.loads(done.stdout)
    trace = args[args.index("--trace") + 1]
    local = Path(trace).name if Path(trace).is_file() else trace
    report["trace"] = local
    report["command"] = "kilter " + " ".join(args).replace(trace, local)
    report["wallSeconds"] = round(time.perf_counter() - started, 1)
    (out / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    return f"{name}: {report['wallSeconds']} s"


def measure(trace: Path, jobs: int, only: str | None) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    todo = [(n, a) for n, a in runs(trace) if only is None or only in n]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for line in pool.map(lambda r: run_one(*r), todo):
            print(line, flush=True)


def _fmt(value: Any) -> str:
    if isinstance(value, float) and abs(value) >= 100:
        return f"{value:,.0f}"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def tables() -> None:
    """One Markdown table per run: the policies with their class figures, and kilter's ratio line."""
    for path in sorted(OUT.glob("*.json")):
        report = json.loads(path.read_text())
        print(f"### {path.stem}\n\n`{report['command']}` ({report['wallSeconds']} s)\n")
        print(
            "| policy | mean wait s | p95 wait s | max wait s | mean JCT s | p95 BSLD | 1-domain wait s | "
            "1-domain p95 s | multi-domain wait s | multi-domain p95 s | multi JCT s | domains ÷ min | util |"
        )
        print("| --- " * 13 + "|")
        for name, m in report["policies"].items():
            one, multi = m["classes"]["oneDomain"], m["classes"]["multiDomain"]
            cells = (
                m["meanWaitSeconds"], m["p95WaitSeconds"], m["maxWaitSeconds"], m["meanJctSeconds"],
                m["p95BoundedSlowdown"], one["meanWaitSeconds"], one["p95WaitSeconds"], multi["meanWaitSeconds"],
                multi["p95WaitSeconds"], multi["meanJctSeconds"], m["meanDomainsPerGang"], m["utilization"],
            )  # fmt: skip
            print(f"| {name} | " + " | ".join(_fmt(c) for c in cells) + " |")
        if "versusBest" in report:
            print(f"\n{report['versusBest']['summary']}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", type=Path, default=PHILLY)
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (default 2)")
    parser.add_argument("--only", help="only the runs whose name contains this")
    parser.add_argument("--tables", action="store_true", help="print the Markdown tables of the stored runs")
    args = parser.parse_args()
    if args.tables:
        tables()
        return
    if not args.trace.is_file():
        raise SystemExit(f"no trace at {args.trace}: pass --trace philly.csv (docs/simulation.md says where)")
    measure(args.trace, args.jobs, args.only)


if __name__ == "__main__":
    main()

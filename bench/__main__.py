"""``python -m bench`` (``make bench``): run every benchmark, write bench/results/*.json, print a summary.

Each benchmark runs in a process of its own, so that what one leaves in
memory (the Volcano bench's 110 MB session bodies, the cold start's store)
does not count in the next one's peak RSS.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = (
    "topology",
    "spares",
    "quota",
    "extender",
    "webhooks",
    "volcano",
    "grpc",
    "pool",
    "coldstart",
    "simulate",
    "hostile",
    "plugin",
    "repair",
    "health",
)
ONE = (
    "import json; from bench import common, {name}; results = {name}.main(); "
    "path = common.write({name!r}, results); print(json.dumps(results, indent=2)); print(f'wrote {{path}}')"
)


def run() -> None:
    root = Path(__file__).resolve().parent.parent
    for name in BENCHMARKS:
        subprocess.run([sys.executable, "-c", ONE.format(name=name)], cwd=root, check=True)


if __name__ == "__main__":
    run()

"""``python -m bench`` (``make bench``): run every benchmark and print a summary."""

from __future__ import annotations

import json

from bench import common, topology


def run() -> None:
    results = topology.main()
    path = common.write("topology", results)
    print(json.dumps(results, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    run()

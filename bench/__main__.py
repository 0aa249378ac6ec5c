"""``python -m bench`` (``make bench``): run every benchmark, write bench/results/*.json, print a summary."""

from __future__ import annotations

import json

from bench import coldstart, common, extender, quota, simulate, topology, volcano, webhooks


def run() -> None:
    for name, module in (
        ("topology", topology),
        ("quota", quota),
        ("extender", extender),
        ("webhooks", webhooks),
        ("volcano", volcano),
        ("coldstart", coldstart),
        ("simulate", simulate),
    ):
        results = module.main()
        path = common.write(name, results)
        print(json.dumps(results, indent=2))
        print(f"wrote {path}")


if __name__ == "__main__":
    run()

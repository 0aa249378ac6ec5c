"""``kilter fleet validate``: each scale-up domain against the shape its platform promises (issue #23).

Exit 1 when any finding is an ``error`` (a domain that cannot be what its
label says), so a delivery pipeline can gate on it; 0 with warnings only
(trays missing). The findings are ``kilter.topology.validate``'s.
"""

from __future__ import annotations

import argparse

from kilter.cli import render, sources
from kilter.topology.validate import Report, validate

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("fleet", help="the fleet's shape: kilter fleet validate")
    verbs = p.add_subparsers(dest="verb", required=True)
    v = verbs.add_parser(
        "validate",
        help="each scale-up domain against its platform's shape; exit 1 on any error",
        description=(
            "Per scale-up domain, the nodes and GPUs seen against the platform's (an NVL72 rack: 18 trays of 4 "
            "GPUs): trays missing (warning), more nodes than one domain holds, mixed products, a node short of "
            "GPUs, a node claiming a domain whose other nodes disagree, a node without its domain label (errors). "
            "Exit 1 when any error is found."
        ),
    )
    sources.add_source_arguments(v, live=True)
    v.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    v.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    state = sources.load_state(args)
    sources.print_warnings(state)
    report = validate(state.nodes, state.catalog, topologies=state.topologies, hypernodes=state.hypernodes)
    if args.output == "table":
        rows = [
            (f.severity, f.domain, f.platform, f.kind, render.compress_names(f.nodes), f.message)
            for f in report.findings
        ]
        print(render.table(("SEVERITY", "DOMAIN", "PLATFORM", "FINDING", "NODES", "MESSAGE"), rows))
        print(summary(report))
    else:
        data = {
            "domains": report.domains,
            "findings": [
                {
                    "domain": f.domain,
                    "platform": f.platform,
                    "kind": f.kind,
                    "severity": f.severity,
                    "nodes": list(f.nodes),
                    "message": f.message,
                }
                for f in report.findings
            ],
        }
        print(render.dump(data, args.output), end="")
    return 1 if report.errors else 0


def summary(report: Report) -> str:
    """``1 error, 2 warnings in 3 GB200-NVL72 domains and 1 MI355X-8 domain``: counts that read as English."""
    errors, warnings = len(report.errors), len(report.findings) - len(report.errors)
    seen = " and ".join(f"{n} {p} domain{'s' * (n != 1)}" for p, n in report.domains.items()) or "no GPU domain"
    return f"{errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)} in {seen}"

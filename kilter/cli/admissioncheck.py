"""``kilter admission-check``: the status the ``kilter.dev/topology`` AdmissionCheck would write, from a snapshot."""

from __future__ import annotations

import argparse
import sys

from kilter.cli import render, sources
from kilter.cli.split_wait_flags import add_split_wait_arguments, read_split_wait
from kilter.gangs.waits import Waits
from kilter.webhooks.admissioncheck import CONTROLLER_NAME, decide, our_checks

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "admission-check",
        help=f"what the {CONTROLLER_NAME} AdmissionCheck would write for each waiting Workload",
        description=(
            f"For every Workload with QuotaReserved=True whose entry for an AdmissionCheck of controller "
            f"{CONTROLLER_NAME} is Pending: the state (Ready, Pending while it waits for fewer domains, Retry, "
            "Rejected), message and podSetUpdates "
            "kilter would write."
        ),
    )
    p.add_argument("--now", metavar="RFC3339", help="judge waits for fewer domains at this time (default: now)")
    add_split_wait_arguments(p)
    sources.add_source_arguments(p)
    p.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    now_s = sources.now_of(args)
    rule = read_split_wait(args)
    state = sources.load_state(args)
    sources.print_warnings(state)
    waits = Waits.of_state(state, rule, now_s=now_s)
    decisions = decide(state, state.fleet(), state.idle_fleet(), now_s=now_s, waits=waits)
    if args.output == "table":
        rows = [(f"{d.namespace}/{d.workload}", d.check, d.state, d.message) for d in decisions]
        print(render.table(("WORKLOAD", "CHECK", "STATE", "MESSAGE"), rows))
        if not our_checks(state):
            print(f"no AdmissionCheck with controllerName {CONTROLLER_NAME} in the snapshot", file=sys.stderr)
        return 0
    data = {
        "admissionChecks": our_checks(state),
        "workloads": [{"namespace": d.namespace, "name": d.workload, "admissionCheck": d.entry()} for d in decisions],
    }
    print(render.dump(data, args.output), end="")
    return 0

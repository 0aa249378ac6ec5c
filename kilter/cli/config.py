"""``kilter config``: print the default Configuration, or check one before it reaches a ConfigMap.

``default`` prints every setting of ``kilter serve`` with its default and
what it does; ``validate FILE`` reads a file as ``kilter serve --config``
would and names each field that is unknown, of the wrong type or in
contradiction with another, by its path (exit 2), or says what it sets
apart from the defaults (exit 0), so a CI step can gate a ConfigMap change.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from kilter.cli import configuration
from kilter.cli.serve_config import DEFAULTS

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("config", help="print the default Configuration of kilter serve, or validate one")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    verbs.add_parser("default", help="print a complete Configuration with every default, documented")
    check = verbs.add_parser("validate", help="check a Configuration file: exit 2 naming each bad field's path")
    check.add_argument("file", type=Path)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.verb == "default":
        print(configuration.default_text(), end="")
        return 0
    config = configuration.config_of(args.file)
    paths = configuration.flag_paths()
    changed = [
        f"{paths[f.name]}: {getattr(config, f.name)!r}"
        for f in dataclasses.fields(config)
        if f.name in paths and getattr(config, f.name) != getattr(DEFAULTS, f.name)
    ]
    print(f"{args.file}: valid; " + (f"sets {', '.join(changed)}" if changed else "every setting at its default"))
    return 0

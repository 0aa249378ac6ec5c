"""``kilter config``: print the default Configuration, or check one before it reaches a ConfigMap.

``default`` prints every setting of ``kilter serve`` with its default and
what it does; ``validate FILE`` reads a file as ``kilter serve --config``
would and names each field that is unknown, of the wrong type or in
contradiction with another, by its path (exit 2), or says what it sets
apart from the defaults (exit 0), so a CI step can gate a ConfigMap change.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pydantic.alias_generators import to_camel

from kilter.cli import configuration, serve, sources
from kilter.cli.spare_flag import check_spare_nodes
from kilter.model.errors import InputError

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("config", help="print the default Configuration of kilter serve, or validate one")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    verbs.add_parser("default", help="print a complete Configuration with every default, documented")
    check = verbs.add_parser(
        "validate",
        help="check a Configuration file as kilter serve reads it: exit 2 naming each bad field's path",
        description="FILE alone, or FILE -- SERVE_FLAGS: with the flags a Deployment gives kilter serve, which win "
        "over the file, so that what is checked is what the pod will run.",
    )
    check.add_argument("file", type=Path)
    check.add_argument("serve_flags", nargs=argparse.REMAINDER, help="kilter serve's flags, after --")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.verb == "default":
        print(configuration.default_text(), end="")
        return 0
    flags = [f for f in args.serve_flags if f != "--"]
    parser = argparse.ArgumentParser(prog="kilter")
    serve.add_parser(parser.add_subparsers(dest="command"))
    argv = ["serve", *flags, "--config", str(args.file)]
    parsed = parser.parse_args(argv)
    given = configuration.explicit_flags(parsed.parser, argv)
    config = configuration.merged(parsed, given)
    try:
        check_spare_nodes(config.spare_nodes_per_domain, sources.catalog_of(config.platforms))
    except InputError as e:
        where = "--spare-nodes-per-domain" if "spare_nodes_per_domain" in given else "spares.nodesPerDomain"
        raise InputError(f"{args.file}: {e.message.replace('--spare-nodes-per-domain', where)}") from None
    file = configuration.load(args.file)
    changed = [
        f"{to_camel(section)}.{field.alias or to_camel(name)}: {getattr(getattr(file, section), name)}"
        for section, _, name, field in configuration.settings()
        if getattr(getattr(file, section), name) != field.default
    ]
    if file.pool is not None:
        changed.append(f"pool: region {file.pool.region} with {len(file.pool.peers)} peers")
    said = f"sets {', '.join(changed)}" if changed else "every setting at its default"
    print(f"{args.file}: valid{' with the flags given' if flags else ''}; {said}")
    return 0

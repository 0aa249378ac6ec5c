"""Command lines that name a mistyped flag: ``unrecognized argument --jbo (did you mean --job?)``.

argparse lets a subcommand's parser pass the words it does not know back
to the top-level parser, which reports them only after the subcommand's own
checks: ``kilter plan --jbo x.yaml`` said ``the following arguments are
required: --job``, and ``--platfrom`` printed ``kilter``'s usage, not
``plan``'s. A ``StrictParser`` with no subcommands of its own refuses an
option it does not know before anything else, with its own usage and the
nearest option it does know. Prefixes are left to argparse (it takes a
unique one and names an ambiguous one's matches), and nothing after ``--``
is looked at.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence
from typing import Any

__all__ = ["StrictParser", "unknown_option"]


def unknown_option(words: Sequence[str], known: Sequence[str]) -> str | None:
    """The error for the first ``--option`` of ``words`` that is not one of ``known`` nor a prefix of one (None
    when every one is; argparse takes a unique prefix and refuses an ambiguous one in its own words), naming the
    nearest known option when one is near."""
    for word in words:
        if word == "--":
            return None
        if not word.startswith("--"):
            continue
        name = word.split("=", 1)[0]
        if any(k.startswith(name) for k in known):  # itself, or a prefix argparse takes or calls ambiguous
            continue
        near = difflib.get_close_matches(name, [k for k in known if k.startswith("--")], n=1)
        return f"unrecognized argument {name}" + (f" (did you mean {near[0]}?)" if near else "")
    return None


class StrictParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` that refuses an unknown option itself (module docstring); the subparsers it
    makes are strict too."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if args is not None and self._subparsers is None:
            problem = unknown_option(args, list(self._option_string_actions))
            if problem is not None:
                self.error(problem)
        return super().parse_known_args(args, namespace)

    def add_subparsers(self, **kwargs: Any) -> Any:
        kwargs.setdefault("parser_class", type(self))
        return super().add_subparsers(**kwargs)

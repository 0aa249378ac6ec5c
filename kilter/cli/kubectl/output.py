"""How every view prints: kubectl's tables (``--no-headers``, ``-o wide`` adds columns) or JSON/YAML of one document.

The data document is the same whatever the format, so ``-o json`` is what
programs read and the table is a view of it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NamedTuple

from kilter.cli import render

__all__ = ["Answer", "Columns", "emit", "table"]

Columns = Sequence[tuple[str, bool]]  # (header, shown only with -o wide)


class Answer(NamedTuple):
    """What a view says: its exit code, its stdout, and a line for stderr. Views return it rather than print, so
    that a running kilter can answer a view (``served``) exactly as the plugin would print it."""

    code: int
    text: str
    error: str = ""


def table(args: argparse.Namespace, columns: Columns, rows: Sequence[Sequence[Any]]) -> str:
    """The rows as a kubectl table; wide-only columns appear with ``-o wide``; no header with ``--no-headers``."""
    keep = [i for i, (_, wide) in enumerate(columns) if not wide or args.output == "wide"]
    headers = [columns[i][0] for i in keep]
    body = [[row[i] for i in keep] for row in rows]
    if not body and not args.no_headers:
        return render.table(headers, [])
    text = render.table(headers, body)
    return text.split("\n", 1)[1] if args.no_headers else text


def emit(args: argparse.Namespace, data: Any, text: str) -> str:
    """``text`` (the table form) for table and wide, else ``data`` in JSON or YAML."""
    return text if args.output in ("table", "wide") else render.dump(data, args.output)

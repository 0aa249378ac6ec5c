"""Entry point of ``kubectl-kilter``, the name kubectl runs for ``kubectl kilter``.

Placeholder: until the plugin's own views (queues, pending, explain,
domains, plan, top) land, it runs the ``kilter`` command line, so that the
one-file build (``make plugin``) has its entry to package.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    from kilter.cli.main import main as kilter_main

    return kilter_main(argv)

"""The ``kilter`` command line: one module per command, output through ``render``."""

from kilter.cli import demo, main, plan, render, sources

__all__ = ["demo", "main", "plan", "render", "sources"]

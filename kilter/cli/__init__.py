"""The ``kilter`` command line: one module per command, output through ``render``."""

from kilter.cli import demo, main, plan, queues, render, serve, sources

__all__ = ["demo", "main", "plan", "queues", "render", "serve", "sources"]

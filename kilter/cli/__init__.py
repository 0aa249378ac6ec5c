"""The ``kilter`` command line: one module per command, output through ``render``."""

from kilter.cli import admissioncheck, demo, main, plan, queues, render, serve, sources

__all__ = ["admissioncheck", "demo", "main", "plan", "queues", "render", "serve", "sources"]

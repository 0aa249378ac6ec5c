"""The ``kilter`` command line: one module per command, output through ``render``.

The command modules are imported on first use, not here: ``kubectl kilter``
and the ``kilter`` command each import what they run, and a plugin call must
not pay for the servers' imports (uvicorn, prometheus, the gRPC stack).
"""

from __future__ import annotations

import importlib
import types

__all__ = [
    "admissioncheck",
    "certs",
    "config",
    "config_reload",
    "configuration",
    "configuration_pool",
    "credential_reading",
    "demo",
    "demo_compare",
    "demo_scheduler",
    "exits",
    "fleet",
    "kubectl",
    "listeners",
    "logs",
    "main",
    "maintenance",
    "parsing",
    "plan",
    "ports",
    "queues",
    "readings",
    "render",
    "serve",
    "serve_config",
    "serve_grpc",
    "serve_pool",
    "simulate",
    "simulate_inputs",
    "simulate_maintenance",
    "simulate_regions",
    "simulate_report",
    "sources",
    "spare_flag",
    "split_wait_flags",
]


def __getattr__(name: str) -> types.ModuleType:
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

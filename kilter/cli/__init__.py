"""The ``kilter`` command line: one module per command, output through ``render``."""

from kilter.cli import (
    admissioncheck,
    demo,
    demo_compare,
    demo_scheduler,
    kubectl,
    listeners,
    main,
    plan,
    queues,
    render,
    serve,
    serve_config,
    serve_grpc,
    simulate,
    sources,
)

__all__ = [
    "admissioncheck",
    "demo",
    "demo_compare",
    "demo_scheduler",
    "kubectl",
    "listeners",
    "main",
    "plan",
    "queues",
    "render",
    "serve",
    "serve_config",
    "serve_grpc",
    "simulate",
    "sources",
]

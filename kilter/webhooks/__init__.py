"""Admission webhooks (mutating, validating) over TLS with certificate reload, and their certificates.

``certs`` and ``cert_controller`` (``kilter certs``, which needs ``cryptography``) are imported on first use,
not here: ``kilter serve`` never loads them.
"""

import importlib
import types

from kilter.webhooks import admission, admissioncheck, mutate, plan_guard, server, tls, validate
from kilter.webhooks.mutate import Mutator
from kilter.webhooks.server import WebhookApp
from kilter.webhooks.validate import Validator

__all__ = [
    "Mutator",
    "Validator",
    "WebhookApp",
    "admission",
    "admissioncheck",
    "cert_controller",
    "certs",
    "mutate",
    "plan_guard",
    "server",
    "tls",
    "validate",
]


def __getattr__(name: str) -> types.ModuleType:
    if name in ("cert_controller", "certs"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

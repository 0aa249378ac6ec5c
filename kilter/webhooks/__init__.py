"""Admission webhooks (mutating, validating) over TLS with certificate reload."""

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
    "mutate",
    "plan_guard",
    "server",
    "tls",
    "validate",
]

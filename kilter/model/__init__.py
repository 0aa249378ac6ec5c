"""Typed models of the Kubernetes objects kilter reads and the wire formats it speaks."""

from kilter.model import (
    annotations,
    asgi,
    codec,
    core_v1,
    durations,
    errors,
    jobs,
    kueue,
    nvidia_dra,
    quantity,
    volcano,
)
from kilter.model.errors import ConfigError, InputError, KilterError, TooLarge, UnknownPlatform

__all__ = [
    "ConfigError",
    "InputError",
    "KilterError",
    "TooLarge",
    "UnknownPlatform",
    "annotations",
    "asgi",
    "codec",
    "core_v1",
    "durations",
    "errors",
    "jobs",
    "kueue",
    "nvidia_dra",
    "quantity",
    "volcano",
]

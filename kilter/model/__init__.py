"""Typed models of the Kubernetes objects kilter reads and the wire formats it speaks."""

from kilter.model import (
    aliasing,
    annotations,
    asgi,
    cert_files,
    codec,
    core_v1,
    durations,
    errors,
    files,
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
    "aliasing",
    "annotations",
    "asgi",
    "cert_files",
    "codec",
    "core_v1",
    "durations",
    "errors",
    "files",
    "jobs",
    "kueue",
    "nvidia_dra",
    "quantity",
    "volcano",
]

"""The one exception tree of kilter.

    KilterError
    ├── InputError        a bad body, snapshot, job, annotation or flag; carries a JSON path
    │   ├── TooLarge      input over a documented bound (a pool peer's message): refused before it costs more
    │   ├── NoGpus        a job none of whose pod sets asks for GPUs: nothing for the planner to place
    │   └── UnsupportedKind  an object of a kind kilter does not read as a job
    ├── ConfigError       configuration that contradicts itself (cohort cycle, limits)
    └── UnknownPlatform   a platform name that neither the catalog nor an override defines

"Does not fit" and "must wait" are results with reasons, never exceptions.
"""

from __future__ import annotations

__all__ = ["ConfigError", "InputError", "KilterError", "NoGpus", "TooLarge", "UnknownPlatform", "UnsupportedKind"]


class KilterError(Exception):
    """Base of every error kilter raises on purpose."""


class InputError(KilterError):
    """Input that kilter cannot use; ``path`` locates the culprit (``$.spec.x``)."""

    def __init__(self, message: str, *, path: str = "$") -> None:
        super().__init__(message)
        self.message = message
        self.path = path

    def __str__(self) -> str:
        return self.message if self.path == "$" else f"{self.message} (at {self.path})"


class TooLarge(InputError):
    """Input larger than a documented bound: unlike a malformed field, a sign of a faulty or hostile sender, which
    the receiver may then leave alone for a while."""


class NoGpus(InputError):
    """A gang none of whose pod sets asks for GPUs: not wrong, only nothing to place (callers let such jobs by)."""


class UnsupportedKind(InputError):
    """An object whose kind kilter does not read as a job: not wrong, only not kilter's to judge."""


class ConfigError(KilterError):
    """Configuration that is well-formed but contradicts itself."""


class UnknownPlatform(KilterError):
    """A platform name that no catalog entry or alias matches."""

    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"unknown platform {name!r}; known: {', '.join(known)}")
        self.name = name
        self.known = known

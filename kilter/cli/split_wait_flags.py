"""The split-wait rule's flags, which ``kilter serve``, ``kilter plan``, ``kubectl kilter plan`` and ``kilter
admission-check`` share, and ``kilter serve``'s ``--reservations``."""

from __future__ import annotations

import argparse

from kilter.model.errors import InputError
from kilter.quota.policy import parse_duration
from kilter.topology.split_wait import (
    DEFAULT_FACTOR,
    DEFAULT_MAX_S,
    DEFAULT_SPLIT_SLOWDOWN,
    MAX_FACTOR,
    SplitWait,
    format_duration,
)

__all__ = [
    "RESERVATIONS_DEFAULT",
    "add_split_wait_arguments",
    "check_split_wait",
    "number",
    "read_split_wait",
    "split_wait_fields",
]

RESERVATIONS_DEFAULT = False  # kept reservations win on some loads and lose on others (docs/simulation.md)


def add_split_wait_arguments(p: argparse.ArgumentParser, *, reservations: bool = False) -> None:
    """The flags of the split-wait rule's defaults (``kilter.gangs.wait_settings``), beside the fields they fill;
    ``reservations``: ``--reservations`` too (``kilter serve``'s alone: only its doors keep them)."""
    if reservations:
        _add_reservations_argument(p)
    p.add_argument(
        "--split-wait",
        default=f"{DEFAULT_FACTOR:g}",
        metavar="FACTOR",
        help="a preferred gang whose best plan now spans more scale-up domains than it needs waits for fewer up to "
        "FACTOR x --split-slowdown x extra domains x its expected runtime (0: never); the ClusterQueue, Cohort or "
        f"job annotation kilter.dev/split-wait wins (default {DEFAULT_FACTOR:g})",
    )
    p.add_argument(
        "--split-wait-max",
        default=format_duration(DEFAULT_MAX_S),
        metavar="DURATION",
        help="the longest such a wait lasts; kilter.dev/split-wait-max wins "
        f"(default {format_duration(DEFAULT_MAX_S)})",
    )
    p.add_argument(
        "--split-slowdown",
        default=f"{DEFAULT_SPLIT_SLOWDOWN:g}",
        metavar="FRACTION",
        help=f"how much slower a gang runs per extra domain, the price of a split (default {DEFAULT_SPLIT_SLOWDOWN:g})",
    )


def _add_reservations_argument(p: argparse.ArgumentParser) -> None:
    """``kilter serve --reservations``: whether every door keeps reservations (``ServeConfig.reservations``)."""
    p.add_argument(
        "--reservations",
        choices=("on", "off"),
        default="on" if RESERVATIONS_DEFAULT else "off",
        help="keep each ClusterQueue's oldest waiting gang bigger than a node a reservation on the domains expected "
        "to free soonest, which other work may use only if it delays the reservation not at all (backfill), while "
        "jobs have not queued all along its expected run (default off)",
    )


def read_split_wait(args: argparse.Namespace) -> SplitWait:
    """The rule ``add_split_wait_arguments``' flags give (for the commands other than ``kilter serve``)."""
    fields = split_wait_fields(args)
    check_split_wait(*fields.values())
    return SplitWait(*fields.values())


def split_wait_fields(args: argparse.Namespace) -> dict[str, float]:
    """The split-wait flags' values, read but not yet checked (``check_split_wait``)."""
    return {
        "split_wait": number(args.split_wait, "--split-wait"),
        "split_wait_max_s": parse_duration(args.split_wait_max, path="--split-wait-max"),
        "split_slowdown": number(args.split_slowdown, "--split-slowdown"),
    }


def check_split_wait(factor: float, max_s: float, slowdown: float) -> None:
    """Refuse a split-wait rule out of range, naming the flag."""
    if not 0 <= factor <= MAX_FACTOR:
        raise InputError(f"--split-wait must be a number from 0 to {MAX_FACTOR:g} (0 turns waiting off)")
    for flag, value in (("--split-wait-max", max_s), ("--split-slowdown", slowdown)):
        if not 0 <= value < float("inf"):
            raise InputError(f"{flag} must be finite and not negative, got {value:g}")


def number(text: str, flag: str) -> float:
    """A plain number flag (``0.5``); its range is the caller's to check."""
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{flag} must be a number, got {text!r}") from None
    if value != value:
        raise InputError(f"{flag} must be a number, got {text!r}")
    return value

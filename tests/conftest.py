"""Shared builders: fleets as raw arrays (for the core) and as Kubernetes objects (for the rest)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"
RECORD_ENV = "KILTER_RECORD_API_CALLS"  # a file: the session's kilter calls are written there as it ends


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``after_live`` run last: they read what the live-mode tests before them made kilter call."""
    items.sort(key=lambda item: item.get_closest_marker("after_live") is not None)


def pytest_sessionfinish(session: pytest.Session) -> None:
    import json
    import os

    from tests.listwatch import KILTER_CALLS

    target = os.environ.get(RECORD_ENV)
    if target:
        Path(target).write_text(json.dumps(KILTER_CALLS), encoding="utf-8")


@dataclass
class Arrays:
    """Constructor arguments of FleetBitmap, built domain by domain."""

    node_domain: list[int] = field(default_factory=list)
    node_gpus: list[int] = field(default_factory=list)
    node_used: list[int] = field(default_factory=list)
    node_usable: list[int] = field(default_factory=list)
    node_start: list[int] = field(default_factory=lambda: [0])
    tray_bits: list[int] = field(default_factory=list)
    platform: list[int] = field(default_factory=list)
    flags: list[int] = field(default_factory=list)
    groups: list[list[int]] = field(default_factory=list)

    def domain(
        self,
        gpus: Sequence[int],
        *,
        used: Sequence[int] | None = None,
        usable: Sequence[int] | None = None,
        tray_bits: int | None = None,
        platform: int = 0,
        detached: bool = False,
        groups: Sequence[int] = (),
    ) -> Arrays:
        d = len(self.tray_bits)
        for i, g in enumerate(gpus):
            self.node_domain.append(d)
            self.node_gpus.append(g)
            self.node_used.append(used[i] if used is not None else 0)
            self.node_usable.append(usable[i] if usable is not None else 1)
        self.node_start.append(len(self.node_domain))
        tb = tray_bits or 1 << max(0, (max(gpus) - 1).bit_length())
        self.tray_bits.append(tb)
        self.platform.append(platform)
        self.flags.append(1 if detached else 0)
        self.groups.append(list(groups))
        return self

    def args(self) -> tuple[Any, ...]:
        n_levels = max((len(g) for g in self.groups), default=0)
        group = np.full((n_levels, len(self.tray_bits)), -1, dtype=np.int32)
        for d, gs in enumerate(self.groups):
            group[: len(gs), d] = gs
        return (
            np.array(self.node_domain, dtype=np.int32),
            np.array(self.node_gpus, dtype=np.int32),
            np.array(self.node_used, dtype=np.int32),
            np.array(self.node_usable, dtype=np.uint8),
            np.array(self.node_start, dtype=np.int32),
            np.array(self.tray_bits, dtype=np.int32),
            np.array(self.platform, dtype=np.int16),
            np.array(self.flags, dtype=np.uint8),
            group,
        )


def i32(values: Sequence[int]) -> npt.NDArray[np.int32]:
    return np.ascontiguousarray(values, dtype=np.int32)


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is absent (the shared data lives outside this repository)")
    return SHARED_DATA

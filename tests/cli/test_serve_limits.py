"""Each endpoint family of the HTTP listener reads bodies up to its own limit, and a 413 names the flag to raise."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kilter.cli.serve import build_app
from kilter.cli.serve_config import DEFAULTS
from kilter.extenders.server import DEFAULT_MAX_BODY_BYTES, DEFAULT_VOLCANO_BODY_BYTES
from tests.extenders.conftest import (
    Served,
    _Server,
    cluster_objects,
    names_args,
    pod_json,
    serve_config,
    write_snapshot,
)

SCHEDULER_LIMIT = 4096
VOLCANO_LIMIT = 64 * 1024


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[Served]:
    snapshot = tmp_path / "snapshot.json"
    write_snapshot(snapshot, cluster_objects())
    config = serve_config(snapshot, max_body_bytes=SCHEDULER_LIMIT, volcano_max_body_bytes=VOLCANO_LIMIT)
    app, store = build_app(config)
    with _Server(app, None) as port:
        yield Served(app, store, snapshot, port)


def padded(size: int) -> bytes:
    """A JSON object of exactly ``size`` bytes (a filter body with a long unknown field)."""
    head = json.dumps(names_args(pod_json("p", 4), ["r1-t00"]))[:-1] + ', "pad": "'
    return (head + "x" * (size - len(head) - 2) + '"}').encode()


def test_the_scheduler_limit_is_a_few_mib_and_volcanos_fits_a_5000_node_session() -> None:
    # 5,000 node names at ~20 bytes plus a 1.5 MiB Pod fit 8 MiB five times; an onSessionOpen of 5,004 nodes
    # is ~110 MB (bench/results/volcano.json).
    assert DEFAULTS.max_body_bytes == DEFAULT_MAX_BODY_BYTES == 8 * 1024 * 1024
    assert DEFAULTS.volcano_max_body_bytes == DEFAULT_VOLCANO_BODY_BYTES > 110_000_000


def test_a_scheduler_body_above_its_limit_is_413_naming_max_body_bytes(limited: Served) -> None:
    status, data, _ = limited.call("POST", "/scheduler/filter", padded(SCHEDULER_LIMIT + 1))
    assert status == 413 and b"--max-body-bytes" in data and str(SCHEDULER_LIMIT).encode() in data


def test_a_volcano_body_between_the_two_limits_is_read(limited: Served) -> None:
    status, data, _ = limited.call("POST", "/volcano/onSessionClose", padded(SCHEDULER_LIMIT * 2))
    assert status == 200, data


def test_a_volcano_body_above_its_limit_is_413_naming_volcano_max_body_bytes(limited: Served) -> None:
    status, data, _ = limited.call("POST", "/volcano/onSessionOpen", padded(VOLCANO_LIMIT + 1))
    assert status == 413 and b"--volcano-max-body-bytes" in data and str(VOLCANO_LIMIT).encode() in data

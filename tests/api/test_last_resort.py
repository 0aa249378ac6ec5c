"""A failure no handler foresaw: INTERNAL in one line, counted in /metrics, and the server goes on answering."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest

from kilter.api import messages
from kilter.api import placement_pb2 as pb
from kilter.gangs import inventory, planning
from kilter.gangs.decisions import Decision
from tests.api.serving import serving, wait_for


def metric(port: int, line_start: str) -> float:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    found = [line for line in body.splitlines() if line.startswith(line_start)]
    return float(found[0].rsplit(" ", 1)[1]) if found else 0.0


def broken(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("a bug\nspread over lines")


def test_a_bug_in_a_unary_call_is_internal_counted_and_leaves_the_server_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = 'kilter_internal_errors_total{path="/kilter.v1.Placement/Inventory"}'
    with serving(tmp_path) as s:
        stub = s.stub()
        monkeypatch.setattr(inventory, "take", broken)
        with pytest.raises(grpc.RpcError) as caught:
            stub.Inventory(pb.InventoryRequest(), timeout=10)
        assert caught.value.code() == grpc.StatusCode.INTERNAL
        assert caught.value.details() == "internal error in kilter (logged): RuntimeError: a bug spread over lines"
        assert metric(s.http_port, counter) == 1.0
        monkeypatch.undo()
        assert len(stub.Inventory(pb.InventoryRequest(), timeout=10).domains) > 0


def test_a_bug_in_plan_is_internal_not_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = (
        b"apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: ml}\nspec:\n  parallelism: 1\n"
        b"  template:\n    spec:\n      containers: [{name: c, resources: {limits: {nvidia.com/gpu: 4}}}]\n"
    )
    with serving(tmp_path) as s:
        monkeypatch.setattr(planning, "plan_object", broken)
        with pytest.raises(grpc.RpcError) as caught:
            s.stub().Plan(pb.PlanRequest(job=job), timeout=10)
        assert caught.value.code() == grpc.StatusCode.INTERNAL
        assert metric(s.http_port, 'kilter_internal_errors_total{path="/kilter.v1.Placement/Plan"}') == 1.0


def test_a_bug_while_streaming_decisions_ends_the_stream_internal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serving(tmp_path) as s:
        monkeypatch.setattr(messages, "watch_response", broken)
        stream = s.stub().WatchDecisions(pb.WatchRequest(), timeout=20)
        feed, loop = s.placement.sources.feed, s.placement.loop
        assert loop is not None and wait_for(lambda: feed.watched)
        decision = Decision(1.0, "scheduler", "filter", "pod", "ml", "p", "fits", "one to stream")
        loop.call_soon_threadsafe(feed.publish, decision)
        with pytest.raises(grpc.RpcError) as caught:
            next(iter(stream))
        assert caught.value.code() == grpc.StatusCode.INTERNAL
        assert metric(s.http_port, 'kilter_internal_errors_total{path="/kilter.v1.Placement/WatchDecisions"}') == 1.0

"""A failure no handler foresaw: INTERNAL in one line, counted in /metrics, and the server goes on answering."""

from __future__ import annotations

import logging
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import timestamp_pb2

from kilter.api import messages
from kilter.api import placement_pb2 as pb
from kilter.gangs import inventory, planning
from kilter.gangs.decisions import Decision
from tests.api.serving import serving, wait_for


def metric(port: int, line_start: str, host: str = "127.0.0.1") -> float:
    body = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()
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


# ---------------------------------------------------------------------------- requests that are not messages

NOT_A_MESSAGE = b"\xff\xff\xff\xff"  # a field tag whose varint never ends


def raw_call(s: Any, method: str, body: bytes) -> grpc.RpcError:
    """``body`` sent as ``method``'s request, unparsed, over a real channel; the error it is answered with."""
    call = s.channel().unary_unary(method)
    with pytest.raises(grpc.RpcError) as caught:
        call(body, timeout=10)
    return caught.value


def refused(port: int, method: str, code: str, host: str = "127.0.0.1") -> float:
    return metric(port, f'kilter_grpc_refused_total{{code="{code}",method="{method}"}}', host)


@pytest.mark.parametrize(
    "method",
    ["/kilter.v1.Placement/Plan", "/kilter.v1.Placement/WatchDecisions", "/grpc.health.v1.Health/Check"],
)
def test_a_request_that_is_not_a_message_is_invalid_argument_counted_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, method: str
) -> None:
    with serving(tmp_path) as s:
        caplog.clear()
        for _ in range(20):
            if method.endswith("WatchDecisions"):
                stream = s.channel().unary_stream(method, None, None)(NOT_A_MESSAGE, timeout=10)
                with pytest.raises(grpc.RpcError) as caught:
                    next(iter(stream))
                error: grpc.RpcError = caught.value
            else:
                error = raw_call(s, method, NOT_A_MESSAGE)
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
            assert (error.details() or "").startswith("the request is not a valid message: DecodeError")
        assert refused(s.http_port, method, "INVALID_ARGUMENT") == 20
        lines = [r for r in caplog.records if method in r.getMessage() or "deserializ" in r.getMessage().lower()]
        assert len(lines) == 1 and lines[0].exc_info is None, [r.getMessage() for r in lines]
        assert len(s.stub().Inventory(pb.InventoryRequest(), timeout=10).domains) > 0, "the server goes on"


def test_an_untrusted_caller_with_a_malformed_request_is_denied_before_it_is_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with serving(tmp_path, address="127.0.0.2", trusted_networks=("10.0.0.0/8",)) as s:
        caplog.clear()
        for _ in range(5):
            error = raw_call(s, "/kilter.v1.Placement/Plan", NOT_A_MESSAGE)
            assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        assert refused(s.http_port, "/kilter.v1.Placement/Plan", "PERMISSION_DENIED", "127.0.0.2") == 5
        assert refused(s.http_port, "/kilter.v1.Placement/Plan", "INVALID_ARGUMENT", "127.0.0.2") == 0
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], "nothing logged for untrusted noise"


JOB = (
    b"apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: ml}\nspec:\n  parallelism: 1\n"
    b"  template:\n    spec:\n      containers: [{name: c, resources: {limits: {nvidia.com/gpu: 4}}}]\n"
)


@pytest.mark.parametrize(
    "request_, field",
    [
        (pb.PlanRequest(job=JOB, now=timestamp_pb2.Timestamp(seconds=2**62)), "now"),
        (pb.PlanRequest(job=JOB, now=timestamp_pb2.Timestamp(seconds=0, nanos=-1)), "now"),
        (pb.PlanRequest(job=b'{"a":' * 5000 + b"1" + b"}" * 5000), "job"),
        (pb.PlanRequest(job=b"- " * 2000 + b"x"), "job"),
    ],
    ids=["now-far-future", "now-negative-nanos", "job-json-5000-deep", "job-yaml-2000-deep"],
)
def test_a_plan_request_out_of_range_or_too_deep_is_invalid_argument(
    tmp_path: Path, request_: pb.PlanRequest, field: str
) -> None:
    with serving(tmp_path) as s:
        with pytest.raises(grpc.RpcError) as caught:
            s.stub().Plan(request_, timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
        assert (caught.value.details() or "").startswith(f"{field}: "), caught.value.details()
        assert metric(s.http_port, 'kilter_internal_errors_total{path="/kilter.v1.Placement/Plan"}') == 0

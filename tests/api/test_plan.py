"""gRPC Plan answers what ``kilter plan -o json`` prints, for every job kind of the demo, over a real socket;
bad jobs get INVALID_ARGUMENT naming the field, never INTERNAL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml
from google.protobuf.timestamp_pb2 import Timestamp

from kilter.api import placement_pb2 as pb
from kilter.api import placement_pb2_grpc as pb_grpc
from kilter.api.servicer import MAX_JOB_BYTES
from kilter.cli.demo import DEMO_JOBS
from kilter.cli.main import main
from tests.api.serving import Serving, serving

NOW = "2026-12-01T11:00:00Z"
DEMO = [doc for doc in yaml.safe_load_all(DEMO_JOBS.read_text()) if doc]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    with serving(tmp_path_factory.mktemp("demo"), demo=True) as s:
        yield s


def at(text: str) -> Timestamp:
    stamp = Timestamp()
    stamp.FromJsonString(text)
    return stamp


def cli_plan(tmp_path: Path, job: dict[str, object], capsys: pytest.CaptureFixture[str], *extra: str) -> object:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    main(["plan", "--demo", "--job", str(path), "--now", NOW, "-o", "json", *extra])
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("job", DEMO, ids=[f"{d['kind']} {d['metadata']['name']}" for d in DEMO])
def test_plan_answers_what_kilter_plan_prints(
    demo: Serving, tmp_path: Path, capsys: pytest.CaptureFixture[str], job: dict[str, object]
) -> None:
    want = cli_plan(tmp_path, job, capsys)
    answer = demo.stub().Plan(pb.PlanRequest(job=yaml.safe_dump(job).encode(), now=at(NOW)))
    got = json.loads(answer.plan_json)
    assert got == want
    assert (answer.feasible, answer.waiting, answer.reason) == (got["feasible"], got["waiting"], got["reason"])


def test_plan_reads_json_and_a_platform_as_the_cli_does(
    demo: Serving, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = DEMO[0]
    want = cli_plan(tmp_path, job, capsys, "--platform", "gb200-nvl72")
    answer = demo.stub().Plan(pb.PlanRequest(job=json.dumps(job).encode(), platform="gb200-nvl72", now=at(NOW)))
    assert json.loads(answer.plan_json) == want


def test_a_platform_the_job_cannot_use_is_invalid_argument(demo: Serving) -> None:
    error = refusal(demo.stub(), pb.PlanRequest(job=yaml.safe_dump(DEMO[0]).encode(), platform="MI355X"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "asks for nvidia.com/gpu, but the gang uses amd.com/gpu" in (error.details() or "")


def test_a_multi_gang_plan_leaves_the_servers_fleet_as_it_found_it(demo: Serving) -> None:
    lws = next(d for d in DEMO if d["kind"] == "LeaderWorkerSet")
    before = demo.store.fleet().bitmap.node_used_gpus.copy()
    first = demo.stub().Plan(pb.PlanRequest(job=yaml.safe_dump(lws).encode(), now=at(NOW)))
    again = demo.stub().Plan(pb.PlanRequest(job=yaml.safe_dump(lws).encode(), now=at(NOW)))
    assert len(json.loads(first.plan_json)["gangs"]) > 1
    assert first.plan_json == again.plan_json
    assert (demo.store.fleet().bitmap.node_used_gpus == before).all()


def refusal(stub: pb_grpc.PlacementStub, request: pb.PlanRequest) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        stub.Plan(request)
    error: grpc.RpcError = caught.value
    return error


BAD = [
    pytest.param(b"{", "job: the job is not valid YAML or JSON", id="malformed YAML"),
    pytest.param(b"", "job: empty", id="empty"),
    pytest.param(b"\xff\xfe", "job: not UTF-8", id="not UTF-8"),
    pytest.param(b"- a\n- b\n", "job: must hold exactly one job object", id="a list"),
    pytest.param(b"a: 1\n---\nb: 2\n", "job: must hold exactly one job object, found 2", id="two documents"),
    pytest.param(b"kind: Job\n", "job: the job needs apiVersion and kind", id="no apiVersion"),
    pytest.param(b"apiVersion: v1\nkind: Secret\n", "job: ", id="a kind kilter does not plan"),
    pytest.param(
        json.dumps({**DEMO[2], "spec": {**DEMO[2]["spec"], "parallelism": "many"}}).encode(),
        "job.spec.parallelism",
        id="wrong type names the field",
    ),
]


@pytest.mark.parametrize(("job", "says"), BAD)
def test_a_bad_job_is_invalid_argument_naming_the_field(demo: Serving, job: bytes, says: str) -> None:
    error = refusal(demo.stub(), pb.PlanRequest(job=job))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert says in (error.details() or "")


def test_an_unknown_platform_is_invalid_argument_naming_platform(demo: Serving) -> None:
    error = refusal(demo.stub(), pb.PlanRequest(job=yaml.safe_dump(DEMO[0]).encode(), platform="TPU-v9"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (error.details() or "").startswith("platform: unknown platform 'TPU-v9'")


def test_a_job_above_the_cap_is_invalid_argument_and_far_above_it_grpc_refuses_it_unread(demo: Serving) -> None:
    over = b"# " + b"x" * MAX_JOB_BYTES + b"\n"
    error = refusal(demo.stub(), pb.PlanRequest(job=over))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (error.details() or "").startswith(f"job: {len(over)} bytes; the limit is {MAX_JOB_BYTES}")
    error = refusal(demo.stub(), pb.PlanRequest(job=b"x" * (3 * MAX_JOB_BYTES)))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_an_answer_says_in_its_trailers_how_long_kilter_spent_on_it(demo: Serving) -> None:
    _, call = demo.stub().Plan.with_call(pb.PlanRequest(job=yaml.safe_dump(DEMO[0]).encode()))
    trailers = dict(call.trailing_metadata() or ())
    assert float(str(trailers["server-timing"]).removeprefix("dur=")) > 0

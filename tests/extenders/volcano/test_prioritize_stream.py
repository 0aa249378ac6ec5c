"""A prioritize body's node names read while it arrives answer exactly as the body read whole."""

from __future__ import annotations

import asyncio
import http.client
import json
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from random import Random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilter._native.names import NameIndex
from kilter.extenders.server import App
from kilter.extenders.volcano import VolcanoExtender, nodeinfo_stream
from kilter.extenders.volcano.nodeinfo_stream import NodeNamesReader, StreamedNodes
from tests.extenders.volcano import payloads as vp
from tests.extenders.volcano.conftest import Volcano, gpu_job, open_session, task_of
from tests.extenders.volcano.test_volcano_http import R1, R2, node

NODES_KEY = b',"nodes":['
FORGED = b',{"Name":"r1-t00","Node":{"metadata":{"name":"r1-t01"'  # a header whose two names differ


def whole(body: bytes, index: NameIndex) -> tuple[bytes, list[int]] | None:
    """What the whole-body path reads off the same bytes (None: it decodes the body in full)."""
    pos = body.find(NODES_KEY)
    if not (body.startswith(b'{"task":') and body.endswith(b"]}") and pos > 0):
        return None
    found = index.lookup_nodeinfos(body, pos)
    return None if found is None else (body[len(b'{"task":') : pos], found[0].tolist())


def streamed(body: bytes, index: NameIndex, cuts: list[int]) -> tuple[bytes, list[int]] | None:
    reader = NodeNamesReader(index)
    for start, end in zip([0, *cuts], [*cuts, len(body)], strict=True):
        reader.feed(body[start:end])
    found = reader.finish()
    return None if found is None else (found.task, found.index.tolist())


def pieces(body: bytes, size: int) -> list[int]:
    return list(range(size, len(body), size))


def go_body(task: dict[str, Any], nodes: list[dict[str, Any]]) -> bytes:
    return vp.to_go_json(vp.prioritize_args(task, nodes))


def realistic(names: list[str]) -> bytes:
    pod = vp.pod("ml", "w-0", "uid-w0", gpus=4, group="pg1")
    return go_body(vp.task_info(pod), [vp.node_info(n, gpus=4, used_gpus=i % 2) for i, n in enumerate(names)])


# ---------------------------------------------------------------------- the reader


def test_pieces_of_every_size_read_as_the_whole_body() -> None:
    long_name = "n" * 253  # a node name's limit: its header starts 265 bytes before its needle
    body = realistic(["r1-t00", long_name, "stranger"])
    index = NameIndex(["r1-t00", long_name])
    expected = whole(body, index)
    assert expected is not None and expected[1] == [0, 1, -1]
    sizes = [*range(1, 3 * nodeinfo_stream.SEAM), *range(3 * nodeinfo_stream.SEAM, len(body) + 1, 211)]
    for size in sizes:
        assert streamed(body, index, pieces(body, size)) == expected, size


def test_a_body_split_anywhere_in_two_or_three_reads_as_the_whole() -> None:
    body = realistic(["r1-t00", "r1-t01"])
    index = NameIndex(["r1-t01", "r1-t00"])
    expected = whole(body, index)
    assert expected is not None and expected[1] == [1, 0]
    for cut in range(1, len(body)):
        assert streamed(body, index, [cut]) == expected, cut
    second = body.find(b',{"Name":"r1-t01"')
    for cut in range(second - 2 * nodeinfo_stream.SEAM, second + 64):
        for gap in (1, 9, 40, nodeinfo_stream.SEAM - 1, nodeinfo_stream.SEAM + 1):
            assert streamed(body, index, [cut, cut + gap]) == expected, (cut, gap)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(json.dumps({"task": {"UID": "t"}, "nodes": []}).encode(), id="not Go's compact bytes"),
        pytest.param(b'{"task":{"UID":"t"},"nodes":[]}', id="an empty nodes list"),
        pytest.param(b'{"task":{"UID":"t"},"nodes":null}', id="null nodes"),
        pytest.param(realistic(["r1-t00"])[:-1], id="a body cut short"),
        pytest.param(realistic(["r1-t00"])[:-2] + b"}", id="a malformed tail"),
        pytest.param(
            realistic(["r1-t00", "r1-t01"]).replace(b',{"Name":"r1-t01"', b'{"Name":"r1-t01"'), id="a comma missing"
        ),
        pytest.param(realistic(["r1-t00", "r1-t01"])[:-2] + FORGED + b"}}]}", id="a forged header"),
        pytest.param(realistic(["r1-t00", "r1\\t01"]), id="an escaped name"),
        pytest.param(b'{"task":', id="only the task key"),
        pytest.param(b"", id="nothing"),
    ],
)
def test_bodies_the_whole_path_would_decode_in_full_end_in_none(body: bytes) -> None:
    index = NameIndex(["r1-t00", "r1-t01"])
    assert whole(body, index) is None
    for size in (1, 7, 10, 100, 1000, 4096, len(body) + 1):
        assert streamed(body, index, pieces(body, size)) is None, size


def test_names_longer_than_kubernetes_allows_read_as_the_whole_or_not_at_all() -> None:
    names = ["a" * 600, "b" * 5000, "c"]
    body = realistic(names)
    index = NameIndex(names)
    expected = whole(body, index)
    assert expected is not None and expected[1] == [0, 1, 2]
    for size in (1, 100, 999, 1024, 1025, 3000, 65536):
        assert streamed(body, index, pieces(body, size)) in (expected, None), size
    assert streamed(body, index, []) == expected  # one piece: the whole-body scan


def test_thousands_of_nodes_in_small_pieces_keep_their_order() -> None:
    names = [f"r{r}-t{t:02d}" for r in range(100) for t in range(18)]
    nodes = [{"Name": n, "Node": {"metadata": {"name": n}}, "Idle": {}} for n in names]
    body = go_body({"UID": "t"}, nodes)
    index = NameIndex(names[::-1])
    expected = whole(body, index)
    assert expected is not None and expected[1] == list(range(len(names) - 1, -1, -1))
    for size in (5, 64, 333, 1024, 1025, 4096):
        assert streamed(body, index, pieces(body, size)) == expected, size


def test_finish_reads_once() -> None:
    reader = NodeNamesReader(NameIndex(["r1-t00"]))
    reader.feed(realistic(["r1-t00"]))
    found = reader.finish()
    assert isinstance(found, StreamedNodes) and found.index.tolist() == [0]
    with pytest.raises(RuntimeError):
        reader.finish()


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.from_regex(r"[a-z0-9ü\\&][a-z0-9.ü-]{0,60}", fullmatch=True), unique=True, min_size=1, max_size=12),
    st.lists(st.integers(min_value=0, max_value=6000), max_size=20),
    st.integers(min_value=-1, max_value=6000),
    st.randoms(use_true_random=False),
)
def test_any_body_in_any_pieces_reads_as_the_whole(
    names: list[str], cuts: list[int], forge_at: int, rng: Random
) -> None:
    offered = list(names)
    rng.shuffle(offered)
    nodes = [{"Name": n, "Node": {"metadata": {"name": n, "uid": "u"}}, "Idle": {}} for n in offered]
    body = go_body({"UID": "t", "Name": "w-0"}, nodes)
    if 0 <= forge_at < len(body):
        body = body[:forge_at] + FORGED + body[forge_at:]  # a forged header anywhere, even inside a string
    index = NameIndex(names[1:])
    assert streamed(body, index, sorted(c for c in set(cuts) if 0 < c < len(body))) == whole(body, index)


# ---------------------------------------------------------------------- over HTTP


def post_in_pieces(v: Volcano, body: bytes, cuts: list[int], *, path: str = "/volcano/prioritize") -> Any:
    """POST ``body`` sent in pieces ending at ``cuts``, a pause between them so that each arrives apart."""
    conn = http.client.HTTPConnection("127.0.0.1", v.port, timeout=10)
    try:
        conn.putrequest("POST", path)
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders()
        for start, end in zip([0, *cuts], [*cuts, len(body)], strict=True):
            conn.send(body[start:end])
            time.sleep(0.005)
        response = conn.getresponse()
        assert response.status == 200
        return json.loads(response.read())
    finally:
        conn.close()


@dataclass
class Streams:
    """The extender's count of prioritize bodies read while they arrived, answered or read again whole."""

    ext: VolcanoExtender
    answered: int = 0
    fell_back: int = 0

    def clear(self) -> None:
        self.answered, self.fell_back = self.ext.streamed_answers, self.ext.streamed_fallbacks

    def seen(self) -> list[bool]:
        """One entry per streamed body since ``clear``: True when it was answered from the streamed reading."""
        answered = self.ext.streamed_answers - self.answered
        fell_back = self.ext.streamed_fallbacks - self.fell_back
        return [True] * answered + [False] * fell_back


@pytest.fixture
def streams(volcano: Volcano) -> Streams:
    """How the prioritize bodies posted from here on were answered (the extender's own counters)."""
    ext = volcano.app.volcano
    assert ext is not None
    seen = Streams(ext)
    seen.clear()
    return seen


def cut_points(body: bytes) -> list[list[int]]:
    """Ways to cut a body: in the middle of a header (its Name, then its needle), at a seam, in even pieces."""
    header = body.find(b',{"Name":"', body.find(NODES_KEY) + len(NODES_KEY))
    needle = body.find(b'"Node":{"metadata":{"name":"', header)
    ways = [[], [header + 5], [header + 5, needle + 14], [needle + 30]]
    return [*ways, pieces(body, 4096), pieces(body, 65536)]


def test_a_streamed_body_answers_as_any_json_does(volcano: Volcano, streams: Streams) -> None:
    solo, gang = gpu_job("solo", 1, 4), gpu_job("gang", 4, 4)
    open_session(volcano, [solo, gang])
    nodes = [node(n) for n in (*R1[:8], *R2[:8])] + [vp.node_info("stranger", gpus=4)]
    for task in (task_of(solo), task_of(gang)):
        args = vp.prioritize_args(task, nodes)
        fallback = volcano.post("prioritize", json.dumps(args, indent=1).encode())
        assert fallback[0] == 200 and len(fallback[1]["nodeScore"]) == 16
        body = vp.to_go_json(args)
        for cuts in cut_points(body):
            streams.clear()
            assert post_in_pieces(volcano, body, cuts) == fallback[1], cuts
            assert streams.seen() == [True]
        assert post_in_pieces(volcano, body, pieces(body, 1000), path="/volcano/v1.9/prioritize") == fallback[1]


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda body: body[:-2] + b"}", id="a malformed tail"),
        pytest.param(lambda body: body[:-2] + FORGED + b"}}]}", id="a forged header"),
        pytest.param(lambda body: body[: body.find(NODES_KEY)] + b',"nodes":[]}', id="an empty nodes list"),
    ],
)
def test_a_body_the_reader_refuses_answers_as_the_whole_body_path(
    volcano: Volcano, streams: Streams, damage: Callable[[bytes], bytes]
) -> None:
    solo = gpu_job("solo", 1, 4)
    open_session(volcano, [solo])
    body = damage(go_body(task_of(solo), [node(n) for n in R1[:4]]))
    status, data, _ = volcano.call("POST", "/volcano/prioritize", body)
    assert status == 200
    for cuts in cut_points(body):
        assert post_in_pieces(volcano, body, cuts) == json.loads(data), cuts
    assert not any(streams.seen())


def call_app(app: App, body: bytes, cuts: list[int]) -> tuple[int, bytes]:
    """One ASGI call whose body arrives exactly in the given pieces, then an empty last one."""
    bounds = zip([0, *cuts], [*cuts, len(body)], strict=True)
    messages = [{"type": "http.request", "body": body[a:b], "more_body": True} for a, b in bounds]
    messages.append({"type": "http.request", "body": b"", "more_body": False})
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        return messages.pop(0)

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/volcano/prioritize", "headers": []}
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], sent[1]["body"]


def test_every_split_of_a_body_into_pieces_answers_the_same(volcano: Volcano, streams: Streams) -> None:
    solo = gpu_job("solo", 1, 4)
    open_session(volcano, [solo])
    body = go_body(task_of(solo), [node(n) for n in R1[:3]] + [vp.node_info("stranger", gpus=4)])
    expected = call_app(volcano.app, body, [])
    assert expected[0] == 200 and json.loads(expected[1])["nodeScore"]
    for cut in range(1, len(body), 37):
        assert call_app(volcano.app, body, [cut, min(cut + 3000, len(body))]) == expected, cut
    assert all(streams.seen())


def test_metrics_show_the_streamed_answers_and_the_bodies_decoded_whole(volcano: Volcano) -> None:
    solo = gpu_job("solo", 1, 4)
    open_session(volcano, [solo])
    body = go_body(task_of(solo), [node(n) for n in R1[:3]])
    assert post_in_pieces(volcano, body, pieces(body, 4096))["nodeScore"]
    assert volcano.post("prioritize", json.dumps(json.loads(body), indent=1).encode())[0] == 200
    status, data, _ = volcano.call("GET", "/metrics")
    assert status == 200
    text = data.decode()
    assert 'kilter_volcano_prioritize_streamed_total{outcome="answered"} 1.0' in text
    assert 'kilter_volcano_prioritize_streamed_total{outcome="fallback"} 1.0' in text
    assert 'kilter_volcano_whole_decodes_total{kind="PrioritizeArgs"} 1.0' in text

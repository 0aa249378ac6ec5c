"""The compiled name index answers exactly as a dict would."""

from __future__ import annotations

import json
from random import Random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilter._native import names
from kilter._native.twin import names as twin
from tests.extenders.volcano import payloads as vp


def lookup(index: names.NameIndex | twin.NameIndex, wanted: list[str]) -> tuple[list[int], int]:
    out = np.empty(len(wanted), dtype=np.int32)
    unknown = index.lookup(wanted, out)
    return out.tolist(), unknown


def test_names_map_to_their_index_and_strangers_to_minus_one() -> None:
    index = names.NameIndex(["gb200-r001-t00", "gb200-r001-t01", "nœud-ü"])
    assert lookup(index, ["gb200-r001-t01", "zz", "nœud-ü", "", "gb200-r001-t0"]) == ([1, -1, 2, -1, -1], 3)
    assert index.index("gb200-r001-t00") == 0 and len(index) == 3


def test_freshly_decoded_strings_are_found() -> None:
    index = names.NameIndex([f"node-{i}" for i in range(1000)])
    wanted = json.loads(json.dumps([f"node-{i}" for i in range(999, -1, -7)]))
    assert lookup(index, wanted)[0] == list(range(999, -1, -7))


def test_duplicates_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        names.NameIndex(["a", "b", "a"])


def test_non_strings_are_a_type_error() -> None:
    with pytest.raises(TypeError, match="not str"):
        names.NameIndex(["a"]).lookup(["a", 3], np.empty(2, dtype=np.int32))  # type: ignore[list-item]


def test_an_empty_index_knows_nothing() -> None:
    assert lookup(names.NameIndex([]), ["a"]) == ([-1], 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=12), unique=True, max_size=60), st.lists(st.text(max_size=12), max_size=40))
def test_core_and_twin_agree(known: list[str], extra: list[str]) -> None:
    wanted = known[::2] + extra
    assert lookup(names.NameIndex(known), wanted) == lookup(twin.NameIndex(known), wanted)


def test_names_resolve_straight_from_a_json_array() -> None:
    index = names.NameIndex(["a", "bb", "node-3"])
    found = index.lookup_json(b' [ "node-3","zz" ,\n"a"] ')
    assert found is not None
    assert found[0].tolist() == [2, -1, 0] and found[1] == 1
    empty = index.lookup_json(b"[]")
    assert empty is not None and empty[0].tolist() == [] and empty[1] == 0


def test_an_escaped_name_asks_for_the_normal_decoder() -> None:
    assert names.NameIndex(["a"]).lookup_json(b'["a", "b\\u0041"]') is None


@pytest.mark.parametrize(
    "data",
    [b"", b"{}", b'["a"', b'["a" "b"]', b'["a",]', b"[1]", b'["a"] x', b'["a\nb"]', b'["abc'],
)
def test_malformed_json_arrays_are_value_errors(data: bytes) -> None:
    with pytest.raises(ValueError):
        names.NameIndex(["a"]).lookup_json(data)
    with pytest.raises(ValueError):
        twin.NameIndex(["a"]).lookup_json(data)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.from_regex(r"[a-z0-9][a-z0-9.-]{0,20}", fullmatch=True), unique=True, max_size=50),
    st.lists(st.from_regex(r"[a-z0-9.-]{0,20}", fullmatch=True), max_size=30),
)
def test_json_lookup_agrees_with_the_twin(known: list[str], extra: list[str]) -> None:
    data = json.dumps(known[::3] + extra).encode()
    a = names.NameIndex(known).lookup_json(data)
    b = twin.NameIndex(known).lookup_json(data)
    assert a is not None and b is not None
    assert (a[0].tolist(), a[1]) == (b[0].tolist(), b[1])


# ------------------------------------------------------------------ NodeInfo headers in a prioritize body

NODES_KEY = b',"nodes":['


def nodeinfo(name: str, *, metadata_name: str | None = None) -> dict[str, object]:
    """A NodeInfo cut down to the fields around its header, in Go's field order."""
    node = {"metadata": {"name": name if metadata_name is None else metadata_name, "uid": "u"}, "spec": {}}
    return {"Name": name, "Node": node, "State": {"Phase": 1, "Reason": ""}, "Idle": {"MilliCPU": 1000}}


def small_body(nodes: list[dict[str, object]]) -> bytes:
    return vp.to_go_json({"task": {"UID": "t"}, "nodes": nodes})


def both(known: list[str], body: bytes) -> tuple[object, object]:
    """Core and twin answers, with arrays as lists."""

    def plain(found: tuple[np.ndarray, list[str]] | None) -> object:
        return None if found is None else (found[0].tolist(), found[1])

    start = body.find(NODES_KEY)
    return (
        plain(names.NameIndex(known).lookup_nodeinfos(body, start)),
        plain(twin.NameIndex(known).lookup_nodeinfos(body, start)),
    )


def test_node_names_are_read_off_a_volcano_prioritize_body() -> None:
    # The task's Pod and a node's annotation both carry the header text; in a JSON string its quotes
    # are escaped, so neither is taken for an element.
    header = '{"Name":"gb-r000-t00","Node":{"metadata":{"name":"gb-r000-t00"'
    pod = vp.pod("ml", "w-0", "uid-w0", gpus=4, group="pg1", annotations={"note": header})
    nodes = [vp.node_info(f"gb-r000-t0{i}", gpus=4, used_gpus=i % 2) for i in range(4)]
    nodes.insert(2, vp.node_info("cpu-1", gpus=0, node_obj=vp.node("cpu-1", gpus=0, annotations={"x": header})))
    body = vp.to_go_json(vp.prioritize_args(vp.task_info(pod), nodes))
    assert body.count(header.encode()) == 1  # the real element
    assert body.count(header.replace('"', '\\"').encode()) == 3  # the task's Pod and PodAnnotations, cpu-1's Node
    known = ["gb-r000-t03", "gb-r000-t01", "gb-r000-t00"]
    # gb-r000-t00 -> 2, t01 -> 1, cpu-1 unknown, t02 unknown, t03 -> 0
    assert both(known, body) == (([2, 1, -1, -1, 0], ["cpu-1", "gb-r000-t02"]),) * 2


def test_a_header_whose_names_differ_asks_for_the_full_decoder() -> None:
    body = small_body([nodeinfo("a"), nodeinfo("b", metadata_name="c")])
    assert both(["a", "b", "c"], body) == (None, None)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param('no"de', id="a quote"),
        pytest.param("no\\de", id="a backslash"),
        pytest.param("a&b", id="an ampersand Go writes as \\u0026"),
        pytest.param("tab\there", id="a control character"),
    ],
)
def test_an_escaped_node_name_asks_for_the_full_decoder(name: str) -> None:
    assert both(["a", name], small_body([nodeinfo("a"), nodeinfo(name)])) == (None, None)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(small_body([]), id="an empty nodes list"),
        pytest.param(b'{"task":{"UID":"t"},"nodes":[{"Name":"a","Node":null}]}', id="a NodeInfo without its Node"),
        pytest.param(b'{"task":null,"nodes":[{"Name":"a"}]}', id="a NodeInfo without a header"),
    ],
)
def test_no_header_means_no_answer(body: bytes) -> None:
    assert both(["a"], body) == (None, None)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"task":{},"nodes":[{"Name":"a","Node":{"metadata":{"name":"a', id="a name cut short"),
        pytest.param(b'{"task":{},"nodes":[{"Name":"a","Node":{"metadata":{"name":"\xff"}}}]}', id="invalid UTF-8"),
        pytest.param(
            b'{"task":{},"nodes":[{"Name":"a","X":{"Name":"a","Node":{"metadata":{"name":"a"}}}}]}',
            id="a header inside an element",
        ),
        pytest.param(
            b'{"task":{},"nodes":[ {"Name":"a","Node":{"metadata":{"name":"a"}}}]}', id="a space before an element"
        ),
        pytest.param(
            b'{"task":{},"nodes":[{"Name":"a","Node":{"metadata":{"name":"a"}}},"Node":{"metadata":{"name":"a"}}]}',
            id="a needle without its Name",
        ),
    ],
)
def test_anything_but_go_layout_asks_for_the_full_decoder(body: bytes) -> None:
    assert both(["a"], body) == (None, None)


def test_non_ascii_names_come_back_as_str() -> None:
    body = small_body([nodeinfo("nœud-ü"), nodeinfo("ノード")])
    assert both(["nœud-ü"], body) == (([0, -1], ["ノード"]),) * 2


def test_elements_before_start_are_not_read() -> None:
    body = small_body([nodeinfo("a"), nodeinfo("b")])
    second = body.find(b',{"Name":"b"')
    for index in (names.NameIndex(["a", "b"]), twin.NameIndex(["a", "b"])):
        found = index.lookup_nodeinfos(body, second)
        assert found is not None and found[0].tolist() == [1]
        assert index.lookup_nodeinfos(body, len(body)) is None
        with pytest.raises(ValueError, match="outside"):
            index.lookup_nodeinfos(body, len(body) + 1)
        with pytest.raises(ValueError, match="outside"):
            index.lookup_nodeinfos(body, -1)


def test_hundreds_of_elements_outgrow_the_first_buffer() -> None:
    strangers = [f"stranger-{i}" for i in range(300)]
    body = small_body([nodeinfo(n) for n in strangers] + [nodeinfo("a")])
    assert both(["a"], body) == (([-1] * 300 + [0], strangers),) * 2


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.from_regex(r"[a-z0-9ü][a-z0-9.ü-]{0,40}", fullmatch=True), unique=True, min_size=1, max_size=60),
    st.lists(st.from_regex(r"[a-z0-9.ü-]{0,20}", fullmatch=True), max_size=30),
    st.randoms(use_true_random=False),
)
def test_nodeinfo_lookup_agrees_with_the_twin_and_the_names(known: list[str], extra: list[str], rng: Random) -> None:
    offered = known[::2] + extra
    rng.shuffle(offered)
    body = small_body([nodeinfo(n) for n in offered])
    expected = None
    if offered:
        where = {name: i for i, name in enumerate(known)}
        expected = ([where.get(n, -1) for n in offered], [n for n in offered if n not in where])
    assert both(known, body) == (expected, expected)


# ------------------------------------------------------------------ the same body scanned piece by piece

KEEP = 12 + 253  # bytes a header may begin before its needle: ',{"Name":"' + a 253-byte name + '",'

Index = names.NameIndex | twin.NameIndex


def scan_in_pieces(index: Index, body: bytes, cuts: list[int]) -> tuple[list[int], list[str]] | None:
    """``lookup_nodeinfos(body, marker)`` fed body[marker:] in pieces ending at ``cuts``, keeping KEEP bytes back."""
    marker = body.find(NODES_KEY)
    found: list[int] = []
    unknown: list[str] = []
    buf, buf_at, resume = b"", marker, marker
    ends = [c for c in cuts if marker < c < len(body)] + [len(body)]
    for end in ends:
        buf += body[buf_at + len(buf) : end]
        out, strangers, after, ok = index.scan_nodeinfos(
            buf, resume - buf_at, floor=max(marker - buf_at, 0), final=end == len(body)
        )
        if not ok:
            return None
        assert resume - buf_at <= after <= len(buf)
        found += out.tolist()
        unknown += strangers
        resume = buf_at + after
        keep = max(resume - KEEP, buf_at)
        buf, buf_at = buf[keep - buf_at :], keep
    return (found, unknown) if found else None


def realistic_body() -> bytes:
    """A task and three NodeInfos (one an 8-byte name, one 253 bytes long, one unknown) as Go writes them."""
    pod = vp.pod("ml", "w-0", "uid-w0", gpus=4, group="pg1")
    nodes = [vp.node_info(n, gpus=4, used_gpus=i % 2) for i, n in enumerate(["gb-r0-t0", "n" * 253, "stranger"])]
    return vp.to_go_json(vp.prioritize_args(vp.task_info(pod), nodes))


REALISTIC_KNOWN = ["n" * 253, "gb-r0-t0", "other"]


def test_a_body_split_anywhere_in_two_reads_as_the_whole() -> None:
    body = realistic_body()
    marker = body.find(NODES_KEY)
    whole = ([1, 0, -1], ["stranger"])
    for index in (names.NameIndex(REALISTIC_KNOWN), twin.NameIndex(REALISTIC_KNOWN)):
        assert scan_in_pieces(index, body, []) == whole
        for cut in range(marker, len(body) + 1):
            assert scan_in_pieces(index, body, [cut]) == whole, cut


def test_a_body_fed_in_pieces_of_any_size_reads_as_the_whole() -> None:
    body = realistic_body()
    index = names.NameIndex(REALISTIC_KNOWN)
    for size in range(1, len(body) + 1):
        assert scan_in_pieces(index, body, list(range(0, len(body), size))) == ([1, 0, -1], ["stranger"]), size


def test_core_and_twin_stop_at_the_same_place_in_every_prefix() -> None:
    body = small_body([nodeinfo("a"), nodeinfo("bb"), nodeinfo("a\\b")])  # the third has an escape
    marker = body.find(NODES_KEY)
    core, ref = names.NameIndex(["a", "bb"]), twin.NameIndex(["a", "bb"])
    for end in range(marker, len(body) + 1):
        for final in (False, True):
            a = core.scan_nodeinfos(body[:end], marker, floor=marker, final=final)
            b = ref.scan_nodeinfos(body[:end], marker, floor=marker, final=final)
            assert (a[0].tolist(), *a[1:]) == (b[0].tolist(), *b[1:]), (end, final)


def test_a_needle_or_name_cut_off_is_left_for_the_next_piece() -> None:
    body = small_body([nodeinfo("abc")])
    needle = body.find(b'"Node":')
    name_end = body.find(b'"', needle + 28)
    for index in (names.NameIndex(["abc"]), twin.NameIndex(["abc"])):
        for end in range(needle, name_end + 1):  # the needle or the name cut off: resume at the needle
            whole_needle = end >= needle + 28
            out, _, resume, ok = index.scan_nodeinfos(body[:end], 0, floor=0, final=False)
            assert ok and out.tolist() == [] and resume == (needle if whole_needle else end - 27)
            assert index.scan_nodeinfos(body[:end], 0, floor=0, final=True)[3] is not whole_needle
        out, _, resume, ok = index.scan_nodeinfos(body[: name_end + 1], 0, floor=0, final=False)
        assert ok and out.tolist() == [0] and resume == name_end + 1


def test_a_header_reaching_below_the_floor_fails() -> None:
    body = small_body([nodeinfo("a"), nodeinfo("b")])
    second = body.find(b',{"Name":"b"')
    for index in (names.NameIndex(["a", "b"]), twin.NameIndex(["a", "b"])):
        assert index.scan_nodeinfos(body, second, floor=second, final=True)[0].tolist() == [1]
        assert index.scan_nodeinfos(body, second + 1, floor=second + 1, final=True)[3] is False
        assert index.scan_nodeinfos(body[second + 1 :], 0, floor=0, final=True)[3] is False
        with pytest.raises(ValueError, match="floor"):
            index.scan_nodeinfos(body, second, floor=second + 1, final=True)
        with pytest.raises(ValueError, match="floor"):
            index.scan_nodeinfos(body, second, floor=-1, final=True)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.from_regex(r"[a-z0-9ü\\&][a-z0-9.ü-]{0,40}", fullmatch=True), unique=True, min_size=1, max_size=20),
    st.lists(st.integers(min_value=0, max_value=4000), max_size=12),
    st.randoms(use_true_random=False),
)
def test_pieces_read_as_the_whole_body_in_core_and_twin(known: list[str], cuts: list[int], rng: Random) -> None:
    offered = list(known)
    rng.shuffle(offered)
    body = small_body([nodeinfo(n) for n in offered])
    cuts = sorted(set(cuts))
    whole = both(known[1:], body)
    assert whole[0] == whole[1]
    for index in (names.NameIndex(known[1:]), twin.NameIndex(known[1:])):
        assert scan_in_pieces(index, body, cuts) == whole[0]

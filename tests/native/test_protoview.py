"""The compiled protobuf view decoder reads the wire format exactly as its plain-Python twin does."""

from __future__ import annotations

import struct
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilter._native import protoview as native
from kilter._native.twin import protoview as twin

IMPLS = [native, twin]


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def tag(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def field(number: int, payload: bytes) -> bytes:
    return tag(number, 2) + varint(len(payload)) + payload


def number_field(number: int, value: int) -> bytes:
    return tag(number, 0) + varint(value)


def entry(key: str, value: bytes) -> bytes:
    return field(1, key.encode()) + field(2, value)


def views(impl: ModuleType) -> tuple[Any, Any]:
    """A toy schema with every kind: an outer message holding an inner one, repeated and shared."""
    inner = impl.Message(
        lambda *s: ("inner", *s),
        ("", 0, False),
        {1: (0, impl.SHARED_STRING, None, 0), 2: (1, impl.INT, None, 0), 3: (2, impl.BOOL, None, 0)},
        dedup=True,
    )
    empty: dict[str, str] = {}
    outer = impl.Message(
        lambda *s: ("outer", *s),
        ("dflt", None, (), (), empty, empty, None, "", (), empty),
        {
            1: (0, impl.STRING, None, 0),
            2: (1, impl.TIME, None, 0),
            3: (2, impl.MESSAGE, inner, impl.REPEATED),
            4: (3, impl.MESSAGE, inner, impl.REPEATED | impl.SHARED),
            5: (4, impl.STRING_MAP, None, 0),
            6: (5, impl.QUANTITY_MAP, None, impl.SHARED),
            7: (6, impl.MESSAGE, inner, 0),
            8: (7, impl.QUANTITY, None, 0),
            9: (8, impl.SHARED_STRING, None, impl.REPEATED),
            10: (9, impl.STRING_MAP, None, impl.SHARED),
        },
    )
    meta = impl.Message(lambda *s: s, ("", ""), {2: (0, impl.STRING, None, 0), 3: (1, impl.STRING, None, 0)})
    return outer, meta


def inner_bytes(name: str, count: int, flag: bool) -> bytes:
    return field(1, name.encode()) + number_field(2, count) + number_field(3, int(flag))


def decode(impl: ModuleType, data: bytes) -> Any:
    outer, _ = views(impl)
    return impl.Decoder().decode(outer, data)


def both(data: bytes) -> Any:
    """The decode of ``data``, which must be the same from the core and the twin (an error included)."""
    results: list[Any] = []
    for impl in IMPLS:
        try:
            results.append(("ok", decode(impl, data)))
        except ValueError as exc:
            assert type(exc).__name__ == "ProtobufError"
            results.append(("error", type(exc).__name__))
    assert results[0] == results[1]
    return results[0]


def test_every_kind_reads_its_field() -> None:
    data = b"".join(
        [
            field(1, "héllo".encode()),
            field(2, number_field(1, 1764576000)),
            field(3, inner_bytes("a", 1, True)),
            field(3, inner_bytes("b", -5, False)),
            field(4, inner_bytes("t", 2, False)),
            field(5, entry("k", b"v")),
            field(5, entry("j", b"w")),
            field(6, entry("nvidia.com/gpu", field(1, b"4"))),
            field(7, inner_bytes("one", 7, True)),
            field(8, field(1, b"500m")),
            field(9, b"x"),
            field(9, b""),
        ]
    )
    for impl in IMPLS:
        got = decode(impl, data)
        assert got == (
            "outer",
            "héllo",
            "2025-12-01T08:00:00Z",
            (("inner", "a", 1, True), ("inner", "b", -5, False)),
            (("inner", "t", 2, False),),
            {"k": "v", "j": "w"},
            {"nvidia.com/gpu": "4"},
            ("inner", "one", 7, True),
            "500m",
            ("x", ""),
            {},
        )


def test_absent_fields_keep_their_defaults_and_empty_strings_count_as_absent() -> None:
    for impl in IMPLS:
        got = decode(impl, field(1, b"") + field(2, b""))
        assert got[1:3] == ("dflt", None)  # "" is Go's zero value (JSON omits it); an empty Time is a zero time
        assert got[3:5] == ((), ())


def test_unknown_fields_of_every_wire_type_are_skipped() -> None:
    unknown = (
        number_field(50, 1 << 40)
        + tag(51, 1)
        + struct.pack("<d", 1.5)
        + field(52, b"\xff" * 300)
        + tag(53, 5)
        + struct.pack("<f", 2.5)
    )
    assert both(unknown + field(1, b"kept") + unknown)[1][1] == "kept"


@pytest.mark.parametrize(
    "data",
    [
        field(1, b"abc")[:-1],  # the string runs past the end
        tag(7, 2) + varint(1 << 40),  # a length far past the end
        b"\x80\x80",  # a varint that never ends
        b"\xff" * 11,  # a varint longer than 64 bits
        tag(1, 0) + varint(3),  # a string field sent as a varint
        field(7, tag(2, 2) + b"\x01x"),  # an int field sent length-delimited
        tag(60, 3),  # a group (never used by Kubernetes)
        tag(60, 1) + b"\x00" * 3,  # a fixed64 cut short
    ],
)
def test_malformed_input_is_a_protobuf_error(data: bytes) -> None:
    assert both(data) == ("error", "ProtobufError")


def test_equal_shared_fields_are_one_object_and_equal_views_are_deduplicated() -> None:
    tolerations = field(4, inner_bytes("t", 1, True)) + field(4, inner_bytes("u", 2, False))
    quantities = field(6, entry("cpu", field(1, b"2")))
    for impl in IMPLS:
        outer, _ = views(impl)
        decoder = impl.Decoder()
        a = decoder.decode(outer, tolerations + quantities + field(1, b"a"))
        b = decoder.decode(outer, field(1, b"b") + tolerations + quantities)
        c = impl.Decoder().decode(outer, tolerations)
        assert a[4] is b[4] and a[6] is b[6]  # one decoder: one value per distinct encoding
        assert a[4] == c[4] and a[4] is not c[4]  # a new decoder starts afresh
        x = decoder.decode(outer, field(7, inner_bytes("same", 1, True)))
        y = decoder.decode(outer, field(7, inner_bytes("same", 1, True)))
        assert x[7] is y[7]


def test_envelope_and_list() -> None:
    meta = field(2, b"42") + field(3, b"token")
    body = field(1, meta) + field(2, field(1, b"first")) + field(2, field(3, b"\x01")) + field(2, field(1, b"third"))
    unknown = field(1, field(1, b"v1") + field(2, b"PodList")) + field(2, body) + field(3, b"") + field(4, b"")
    for impl in IMPLS:
        outer, list_meta = views(impl)
        decoder = impl.Decoder()
        api_version, kind, raw = decoder.unwrap(b"k8s\x00" + unknown)
        assert (api_version, kind, bytes(raw)) == ("v1", "PodList", body)
        errors: list[tuple[int, str]] = []
        got_meta, items = decoder.decode_list(list_meta, outer, raw, lambda i, why, seen=errors: seen.append((i, why)))
        assert got_meta == ("42", "token")
        assert [item[1] for item in items] == ["first", "third"]
        assert [i for i, _ in errors] == [1]  # item 1 sent a string field as a varint: left out, told
        with pytest.raises(ValueError, match="envelope"):
            decoder.unwrap(b'{"kind":"PodList"}')
        assert decoder.decode_list(list_meta, outer, field(2, b""))[0] == ("", "")  # no metadata: its defaults


def test_schema_mistakes_are_refused() -> None:
    for impl in IMPLS:
        with pytest.raises(ValueError, match="slot"):
            impl.Message(tuple, ("",), {1: (1, impl.STRING, None, 0)})
        with pytest.raises(ValueError, match="MESSAGE"):
            impl.Message(tuple, ("",), {1: (0, impl.MESSAGE, None, 0)})
        with pytest.raises(ValueError, match="4096"):
            impl.Message(tuple, ("",), {1 << 29: (0, impl.STRING, None, 0)})
        with pytest.raises(ValueError, match="map"):
            impl.Message(tuple, ("",), {1: (0, impl.STRING_MAP, None, impl.REPEATED)})


@st.composite
def records(draw: Callable[..., Any]) -> bytes:
    """A message of random known and unknown fields, in random order, sometimes cut short."""
    parts: list[bytes] = []
    for _ in range(draw(st.integers(0, 12))):
        number = draw(st.sampled_from([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 63, 2000]))
        wire = draw(st.sampled_from([0, 2, 2, 2, 1, 5]))
        if wire == 0:
            parts.append(number_field(number, draw(st.integers(-(2**63), 2**64 - 1))))
        elif wire == 1:
            parts.append(tag(number, 1) + draw(st.binary(min_size=8, max_size=8)))
        elif wire == 5:
            parts.append(tag(number, 5) + draw(st.binary(min_size=4, max_size=4)))
        elif number in (3, 4, 7):
            name = draw(st.text(max_size=5))
            parts.append(field(number, inner_bytes(name, draw(st.integers(-5, 5)), draw(st.booleans()))))
        elif number in (5, 6, 10):
            parts.append(field(number, entry(draw(st.text(max_size=4)), field(1, draw(st.text(max_size=4)).encode()))))
        elif number == 2:
            parts.append(field(2, number_field(1, draw(st.integers(0, 2**33)))))
        else:
            parts.append(field(number, draw(st.binary(max_size=12))))
    data = b"".join(parts)
    if data and draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data) - 1))]
    return data


@settings(max_examples=300, deadline=None)
@given(records())
def test_the_core_and_its_twin_agree_on_any_input(data: bytes) -> None:
    both(data)

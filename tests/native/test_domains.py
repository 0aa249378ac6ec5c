"""The bitmap model: layout at word edges, incremental updates, and equality with the twin."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilter._native import domains
from kilter._native.twin import domains as twin
from tests.conftest import Arrays


def test_a_tray_of_four_gpus_occupies_four_bits_per_slot() -> None:
    # Node 0 has 4 idle GPUs (bits 0-3), node 1 has 1 of 4 busy: its 3 idle GPUs are bits 4-6.
    fl = domains.FleetBitmap(*Arrays().domain([4, 4], used=[0, 1]).args())
    assert fl.free_words.tolist() == [[0b1111 + 0b1110000]]
    assert fl.healthy_words.tolist() == [[0xFF]]
    assert fl.domain_free_gpus.tolist() == [7]


@pytest.mark.parametrize(
    ("nodes", "expected_words"),
    [
        pytest.param(16, [2**64 - 1], id="16 trays x 4 GPUs fill exactly one word"),
        pytest.param(17, [2**64 - 1, 0b1111], id="the 17th tray starts word 1"),
        pytest.param(18, [2**64 - 1, 0xFF], id="NVL72: 72 bits over two words"),
    ],
)
def test_trays_never_straddle_a_word(nodes: int, expected_words: list[int]) -> None:
    fl = domains.FleetBitmap(*Arrays().domain([4] * nodes).args())
    assert fl.free_words.tolist() == [expected_words]
    assert fl.domain_free_gpus.tolist() == [4 * nodes]


def test_a_144_gpu_kyber_domain_of_72_two_gpu_blades_fills_two_words_and_a_quarter() -> None:
    fl = domains.FleetBitmap(*Arrays().domain([2] * 72, used=[0] * 71 + [1]).args())
    # 144 bits = 64 + 64 + 16; blade 71 (bits 142-143) has one GPU busy, so bit 143 is clear.
    assert fl.free_words.tolist() == [[2**64 - 1, 2**64 - 1, 0x7FFF]]
    assert fl.capacity(2).tolist() == [71]
    assert fl.capacity(1).tolist() == [143]


@pytest.mark.parametrize(
    ("bits", "used", "words"),
    [
        pytest.param(63, 0, [2**63 - 1], id="63 GPUs: bit 63 stays clear"),
        pytest.param(64, 0, [2**64 - 1], id="64 GPUs fill the word"),
        pytest.param(64, 63, [1], id="64 GPUs, 63 busy: only bit 0 idle"),
        pytest.param(65, 0, [2**64 - 1, 1], id="65 GPUs spill one bit into word 1 (slot of 128)"),
        pytest.param(65, 64, [1, 0], id="65 GPUs, 64 busy: the idle GPU is the lowest bit"),
    ],
)
def test_wide_nodes_span_words(bits: int, used: int, words: list[int]) -> None:
    arrays = Arrays().domain([bits], used=[used]).domain([bits])
    fl = domains.FleetBitmap(*arrays.args())
    assert fl.free_words[0].tolist()[: len(words)] == words
    assert fl.domain_free_gpus.tolist() == [bits - used, bits]
    assert fl.node_free_gpus(0) == bits - used


def test_a_failed_tray_shrinks_its_domain_instead_of_poisoning_it() -> None:
    fl = domains.FleetBitmap(*Arrays().domain([4] * 18, usable=[1] * 17 + [0]).args())
    assert fl.domain_usable_gpus.tolist() == [68]
    assert fl.domain_free_gpus.tolist() == [68]
    assert fl.capacity(4).tolist() == [17]
    fl.set_usable(17, True)
    assert fl.capacity(4).tolist() == [18]


def test_allocate_release_and_health_changes_keep_counts_exact() -> None:
    fl = domains.FleetBitmap(*Arrays().domain([4, 4, 4], groups=[0]).domain([8], groups=[0]).args())
    fl.allocate(0, 3)
    fl.allocate(3, 8)
    assert fl.domain_free_gpus.tolist() == [9, 0]
    # hist[d][k] = usable nodes of d with k idle GPUs: domain 0 has one node with 1, two with 4.
    assert fl.free_histogram[0].tolist() == [0, 1, 0, 0, 2, 0, 0, 0, 0]
    assert fl.group_free_gpus(0).tolist() == [9]
    fl.set_usable(1, False)
    assert fl.domain_usable_gpus.tolist() == [8, 8]
    assert fl.group_usable_gpus(0).tolist() == [16]
    fl.release(0, 3)
    fl.release(3, 8)
    assert fl.domain_free_gpus.tolist() == [8, 8]
    assert fl.node_used_gpus.tolist() == [0, 0, 0, 0]


def test_usage_survives_a_node_going_down_and_coming_back() -> None:
    fl = domains.FleetBitmap(*Arrays().domain([4, 4]).args())
    fl.allocate(0, 2)
    fl.set_usable(0, False)
    assert fl.node_free_gpus(0) == 0
    fl.set_usable(0, True)
    assert fl.node_free_gpus(0) == 2


@pytest.mark.parametrize(
    ("op", "node", "gpus", "error"),
    [
        pytest.param("allocate", 0, 5, ValueError, id="more GPUs than idle"),
        pytest.param("allocate", 9, 1, IndexError, id="unknown node"),
        pytest.param("release", 0, 1, ValueError, id="release what was never booked"),
        pytest.param("allocate", 0, -1, ValueError, id="negative GPUs"),
    ],
)
def test_impossible_changes_are_refused_and_change_nothing(op: str, node: int, gpus: int, error: type) -> None:
    fl = domains.FleetBitmap(*Arrays().domain([4, 4]).args())
    before = fl.free_words
    with pytest.raises(error):
        getattr(fl, op)(node, gpus)
    assert (fl.free_words == before).all()


def test_allocating_on_an_unusable_node_is_refused() -> None:
    fl = domains.FleetBitmap(*Arrays().domain([4], usable=[0]).args())
    with pytest.raises(ValueError, match="unusable"):
        fl.allocate(0, 1)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        pytest.param(
            lambda a: a.__setitem__(5, np.array([3], np.int32)),
            "powers of two",
            id="tray bits not a power of 2",
        ),
        pytest.param(lambda a: a.__setitem__(1, np.array([8, 4], np.int32)), "1..tray_bits", id="node above its slot"),
        pytest.param(lambda a: a.__setitem__(2, np.array([5, 0], np.int32)), "node_used", id="more used than GPUs"),
        pytest.param(lambda a: a.__setitem__(4, np.array([0, 1], np.int32)), "node_start", id="offsets miss a node"),
        pytest.param(lambda a: a.__setitem__(8, np.zeros((1, 3), np.int32)), "group", id="group table of wrong shape"),
    ],
)
def test_inconsistent_arrays_are_rejected(mutate: object, message: str) -> None:
    args = list(Arrays().domain([4, 4]).args())
    mutate(args)  # type: ignore[operator]
    with pytest.raises(ValueError, match=message):
        domains.FleetBitmap(*args)


def test_model_memory_for_100k_gpus_stays_small() -> None:
    # 1,389 NVL72 domains of 18 trays (25,002 nodes, 100,008 GPUs) with a block and a spine level.
    arrays = Arrays()
    for d in range(1389):
        arrays.domain([4] * 18, groups=[d // 8, d // 64])
    fl = domains.FleetBitmap(*arrays.args())
    assert fl.nbytes <= 2 * 1024 * 1024


ops = st.lists(
    st.tuples(st.sampled_from(["allocate", "release", "down", "up"]), st.integers(0, 40), st.integers(0, 70)),
    max_size=40,
)


@st.composite
def fleets(draw: st.DrawFn) -> Arrays:
    arrays = Arrays()
    for _ in range(draw(st.integers(1, 5))):
        tb = draw(st.sampled_from([1, 2, 4, 8, 64, 128]))
        n = draw(st.integers(1, 20 if tb <= 8 else 3))
        gpus = [draw(st.integers(1, tb)) for _ in range(n)]
        used = [draw(st.integers(0, g)) for g in gpus]
        usable = [draw(st.integers(0, 1)) for _ in gpus]
        arrays.domain(gpus, used=used, usable=usable, tray_bits=tb, groups=[draw(st.integers(0, 2))])
    return arrays


@settings(max_examples=150, deadline=None)
@given(fleets(), ops)
def test_native_and_twin_agree_after_any_sequence_of_changes(
    arrays: Arrays, changes: list[tuple[str, int, int]]
) -> None:
    native = domains.FleetBitmap(*arrays.args())
    ref = twin.FleetBitmap(*arrays.args())
    for op, raw_node, gpus in changes:
        node = raw_node % native.n_nodes
        for fl in (native, ref):
            if op in ("allocate", "release"):
                with contextlib.suppress(ValueError):
                    getattr(fl, op)(node, gpus % 9)
            else:
                fl.set_usable(node, op == "up")
    assert native.free_words.tolist() == ref.free_words.tolist()
    assert native.healthy_words.tolist() == ref.healthy_words.tolist()
    assert native.domain_free_gpus.tolist() == ref.domain_free_gpus.tolist()
    assert native.free_histogram.tolist() == ref.free_histogram.tolist()
    assert native.group_free_gpus(0).tolist() == ref.group_free_gpus(0).tolist()
    assert native.node_used_gpus.tolist() == ref.node_used_gpus.tolist()
    # Derived counts equal a recount from the bits themselves.
    words = native.free_words
    recount = [sum(int(w).bit_count() for w in row) for row in words]
    assert recount == native.domain_free_gpus.tolist()
    assert not (native.free_words & ~native.healthy_words).any()

"""A layout puts a plan's slots in rank order by each rank's position, as sorting by the gang's full order would,
and finds a rank's position and the order's length without listing the order (a 512-pod repair asks for a few)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kilter.gangs.layout import Layout, SlotSpec
from kilter.gangs.ranks import Place, Shape

SHAPES = st.lists(
    st.tuples(st.sampled_from(["pods", "workers", "leader", "cpu"]), st.integers(0, 9), st.sampled_from([0, 1, 4])),
    min_size=1,
    max_size=4,
    unique_by=lambda s: s[0],
).map(lambda specs: tuple(Shape(*s) for s in specs))


def by_sorting(shaped: Layout, slots: list[SlotSpec]) -> list[SlotSpec]:
    """What the layout answered before positions: a stable sort by the place's index in ``order``."""
    position = {p: i for i, p in enumerate(shaped.order())}
    last = len(position)
    return sorted(slots, key=lambda s: position.get(s[4], last) if s[4] is not None else last)


@settings(max_examples=300, deadline=None)
@given(shapes=SHAPES, data=st.data())
def test_slots_in_order_are_those_a_sort_by_position_gives(shapes: tuple[Shape, ...], data: st.DataObject) -> None:
    shaped = Layout(shapes, ())
    names = [s.name for s in shapes] + ["elsewhere"]
    place = st.one_of(st.none(), st.builds(Place, st.sampled_from(names), st.integers(-1, 10)))
    places = data.draw(st.lists(place, max_size=14))  # duplicates, unknown pod sets and ranks out of range too
    slots: list[SlotSpec] = [(f"n{i}", i, 4, "", p) for i, p in enumerate(places)]
    assert shaped._in_order(slots) == by_sorting(shaped, slots)


@given(shapes=SHAPES)
def test_a_ranks_position_and_the_orders_length_agree_with_the_order(shapes: tuple[Shape, ...]) -> None:
    shaped = Layout(shapes, ())
    order = shaped.order()
    assert shaped.size == len(order)
    assert [shaped.position(p) for p in order] == list(range(len(order)))
    for s in shapes:
        assert shaped.position(Place(s.name, s.pods)) is None  # one past its last rank
        assert shaped.position(Place(s.name, -1)) is None
    assert shaped.position(Place("elsewhere", 0)) is None
    assert shaped.record_places(len(order)) == order
    assert shaped.record_places(len(order) + 1) == [None] * (len(order) + 1)

"""The decision feed: fan-out with a namespace filter, bounded queues, and an exact 'dropped N' where a gap was."""

from __future__ import annotations

import asyncio

from kilter.gangs.decisions import Decision, DecisionFeed, Dropped, Subscription


def decision(i: int, namespace: str = "ml") -> Decision:
    return Decision(float(i), "scheduler", "filter", "pod", namespace, f"p{i}", "fits", f"decision {i}")


def drain(sub: Subscription) -> list[Decision | Dropped]:
    out = []
    while (item := sub.take()) is not None:
        out.append(item)
    return out


def names(items: list[Decision | Dropped]) -> list[str]:
    return [x.name if isinstance(x, Decision) else f"dropped {x.count}" for x in items]


def test_nobody_listening_means_nothing_is_kept_or_counted() -> None:
    feed = DecisionFeed()
    assert not feed.watched
    feed.publish(decision(1))
    assert feed.published == 0


def test_each_subscriber_gets_the_decisions_of_its_namespace_in_order() -> None:
    feed = DecisionFeed()
    everything, ml = feed.subscribe(), feed.subscribe("ml")
    for i, ns in enumerate(["ml", "web", "ml", ""]):
        feed.publish(decision(i, ns))
    assert names(drain(everything)) == ["p0", "p1", "p2", "p3"]
    assert names(drain(ml)) == ["p0", "p2"]


def test_a_full_queue_counts_what_it_misses_and_says_so_where_the_gap_was() -> None:
    feed = DecisionFeed(limit=3)
    sub = feed.subscribe()
    for i in range(10):  # 3 kept, 7 missed
        feed.publish(decision(i))
    assert names(drain(sub)) == ["p0", "p1", "p2", "dropped 7"]
    feed.publish(decision(10))
    assert drain(sub) == [decision(10)]
    assert sub.dropped == 7


def test_a_gap_followed_by_room_keeps_the_marker_before_the_next_decision() -> None:
    feed = DecisionFeed(limit=2)
    sub = feed.subscribe()
    for i in range(4):  # p0, p1 kept; p2, p3 missed
        feed.publish(decision(i))
    assert sub.take() == decision(0)  # one slot free again
    feed.publish(decision(4))
    assert drain(sub) == [decision(1), Dropped(2), decision(4)]


def test_a_closed_subscription_receives_nothing_more() -> None:
    feed = DecisionFeed()
    sub = feed.subscribe()
    sub.close()
    sub.close()
    assert not feed.watched
    feed.publish(decision(1))
    assert sub.take() is None


def test_a_waiting_reader_wakes_on_publish() -> None:
    async def scenario() -> Decision | Dropped:
        feed = DecisionFeed()
        sub = feed.subscribe()
        reader = asyncio.create_task(sub.next())
        await asyncio.sleep(0)
        assert not reader.done()
        feed.publish(decision(5))
        return await reader

    assert asyncio.run(scenario()) == decision(5)

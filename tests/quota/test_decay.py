"""Decayed usage: the half-life law, durability through the annotation, and its effect on shares."""

from __future__ import annotations

import json

import pytest

from kilter.model.errors import InputError
from kilter.quota import decay
from kilter.quota.policy import DecayState, parse_duration, parse_policy
from kilter.quota.status import tree_status
from tests.quota.builders import cq, tree

GPU = ("h100", "nvidia.com/gpu")
DAY = 86400.0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("7d", 7 * DAY), ("36h", 129600.0), ("1h30m", 5400.0), ("45s", 45.0), ("500ms", 0.5), ("1m30s500ms", 90.5)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, path="$") == seconds


@pytest.mark.parametrize("text", ["", "7", "a week", "7d junk", "-1h"])
def test_bad_durations_are_input_errors(text: str) -> None:
    with pytest.raises(InputError):
        parse_duration(text, path="$")


def test_constant_usage_converges_by_halves() -> None:
    # From 0, usage 2 held for one, two, three half-lives: 1, 1.5, 1.75 (Kueue's AFS convergence example).
    state = DecayState(0.0, {GPU: 0.0})
    for expected in (1.0, 1.5, 1.75):
        state = decay.advance(state, {GPU: 2}, now=state.time + 7 * DAY, half_life_s=7 * DAY)
        assert state.usage[GPU] == pytest.approx(expected)


def test_stepping_in_small_samples_equals_one_big_step() -> None:
    one = decay.advance(DecayState(0.0, {GPU: 10.0}), {GPU: 2}, now=DAY, half_life_s=7 * DAY)
    many = DecayState(0.0, {GPU: 10.0})
    for i in range(1, 289):
        many = decay.advance(many, {GPU: 2}, now=i * 300.0, half_life_s=7 * DAY)
    assert many.usage[GPU] == pytest.approx(one.usage[GPU])


def test_the_state_survives_a_restart_through_its_annotation() -> None:
    state = decay.advance(DecayState(1_764_000_000.0, {GPU: 40.0}), {GPU: 8}, now=1_764_086_400.0, half_life_s=7 * DAY)
    text = decay.to_annotation(state)
    restored = parse_policy({"kilter.dev/decayed-usage": text, "kilter.dev/usage-half-life": "7d"}, path="$").decay
    assert restored is not None and restored.time == state.time
    assert restored.usage[GPU] == pytest.approx(state.usage[GPU], abs=1e-3)
    assert json.loads(text)["usage"] == {"h100/nvidia.com/gpu": pytest.approx(state.usage[GPU], abs=1e-3)}


def test_a_queue_that_used_a_lot_recently_ranks_behind_one_that_did_not() -> None:
    # Both borrow 4 of their cohort now; "busy" averaged 20 GPUs over the past days.
    past = decay.to_annotation(DecayState(0.0, {GPU: 20.0}))
    cqs = [
        cq(
            "busy",
            {GPU: 8},
            cohort="c",
            annotations={"kilter.dev/usage-half-life": "7d", "kilter.dev/decayed-usage": past},
        ),
        cq("quiet", {GPU: 8}, cohort="c", annotations={"kilter.dev/usage-half-life": "7d"}),
        cq("lender", {GPU: 16}, cohort="c"),
    ]
    t = tree(cqs, usage={"busy": {GPU: 12}, "quiet": {GPU: 12}})
    status = {s.name: s for s in tree_status(t, now=DAY)[0]}
    assert status["busy"].drs.ratio > status["quiet"].drs.ratio
    assert status["quiet"].drs.ratio == pytest.approx(4 * 1000 / 32)


@pytest.mark.parametrize(
    "value",
    [
        '{"time": "yesterday", "usage": {}}',
        '{"time": "2026-12-01T00:00:00Z", "usage": {"gpu": 1}}',
        '{"time": "2026-12-01T00:00:00Z", "usage": {"a/b": -1}}',
        "[]",
        "{",
    ],
)
def test_a_malformed_decay_state_is_an_input_error(value: str) -> None:
    with pytest.raises(InputError, match=r"decayed-usage|RFC 3339"):
        parse_policy({"kilter.dev/decayed-usage": value}, path="$")

"""Expected runtimes: declared first, else the median of the queue's finished jobs of the same size class."""

from __future__ import annotations

import pytest

from kilter.model.errors import InputError
from kilter.quota.runtimes import RuntimeLearner, declared_runtime, size_class


def test_declared_runtime_is_first_found_of_annotation_label_deadline() -> None:
    both = declared_runtime(
        {"kilter.dev/expected-runtime": "1h30m"}, {"kueue.x-k8s.io/max-exec-time-seconds": "60"}, 30.0, path="$"
    )
    assert both == 5400.0
    assert declared_runtime({}, {"kueue.x-k8s.io/max-exec-time-seconds": "600"}, 30.0, path="$") == 600.0
    assert declared_runtime(None, None, 30.0, path="$") == 30.0
    assert declared_runtime(None, None, None, path="$") is None


@pytest.mark.parametrize(
    ("annotations", "labels"),
    [
        ({"kilter.dev/expected-runtime": "soon"}, {}),
        ({"kilter.dev/expected-runtime": "0s"}, {}),
        ({}, {"kueue.x-k8s.io/max-exec-time-seconds": "-5"}),
        ({}, {"kueue.x-k8s.io/max-exec-time-seconds": "1.5"}),
        ({}, {"kueue.x-k8s.io/max-exec-time-seconds": "٣"}),
    ],
)
def test_bad_declarations_are_refused(annotations: dict[str, str], labels: dict[str, str]) -> None:
    with pytest.raises(InputError):
        declared_runtime(annotations, labels, None, path="$")


def test_size_classes_are_powers_of_two() -> None:
    assert [size_class(g) for g in (1, 2, 3, 4, 7, 8, 72, 0)] == [0, 1, 1, 2, 2, 3, 6, 0]


def test_learner_takes_the_median_of_its_class_and_falls_back_to_queue_then_class() -> None:
    learn = RuntimeLearner(window=3)
    assert learn.estimate("a", 8) is None
    for runtime in (100.0, 300.0, 10_000.0):
        learn.observe("a", 8, runtime)
    assert learn.estimate("a", 8) == 300.0
    assert learn.estimate("a", 12) == 300.0  # same class, 8-15 GPUs
    learn.observe("a", 64, 50.0)
    assert learn.estimate("a", 64) == 50.0
    assert learn.estimate("a", 2) == 300.0  # no history of its class: the median of the queue's last 3 runs
    assert learn.estimate("b", 8) == 300.0  # a new queue borrows the class's history
    assert learn.estimate("b", 2) is None


def test_the_window_forgets_old_runs_and_ignores_nonsense() -> None:
    learn = RuntimeLearner(window=2)
    for runtime in (1.0, 1000.0, 2000.0, float("nan"), -3.0, 0.0):
        learn.observe("a", 4, runtime)
    assert learn.estimate("a", 4) == 1500.0
    assert len(learn) == 2

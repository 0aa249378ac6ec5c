"""A pod's rank, read from the keys its controller writes, and found among the gang's pod sets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilter.gangs import ranks
from kilter.gangs.ranks import Place, RankLabel, Shape, place_of, read_index
from kilter.model import codec
from kilter.model.core_v1 import Pod
from kilter.state.store import ADDED, DELETED, ClusterStore, Event
from tests.extenders.conftest import cluster_objects, pod_json

JOB = "batch.kubernetes.io/job-completion-index"
JS_INDEX, JS_NAME, JS_REPLICAS = (
    "jobset.sigs.k8s.io/job-index",
    "jobset.sigs.k8s.io/replicatedjob-name",
    "jobset.sigs.k8s.io/replicatedjob-replicas",
)
KF_INDEX, KF_TYPE = "training.kubeflow.org/replica-index", "training.kubeflow.org/replica-type"
LWS = "leaderworkerset.sigs.k8s.io/worker-index"
KUEUE_INDEX, KUEUE_INDEX_LABEL = "kueue.x-k8s.io/pod-group-pod-index", "kueue.x-k8s.io/pod-group-pod-index-label"
KUEUE_POD_SET, KUEUE_OFFSET = "kueue.x-k8s.io/podset", "kueue.x-k8s.io/pod-index-offset"


def pod(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None, gpus: int = 4) -> Pod:
    return codec.convert(pod_json("p", gpus, labels=labels, annotations=annotations), Pod)


def test_the_keys_are_spelled_as_upstream_writes_them() -> None:
    assert (ranks.JOB_COMPLETION_INDEX, ranks.JOBSET_JOB_INDEX, ranks.JOBSET_REPLICATED_JOB) == (JOB, JS_INDEX, JS_NAME)
    assert (ranks.JOBSET_REPLICAS, ranks.KUBEFLOW_REPLICA_INDEX, ranks.KUBEFLOW_REPLICA_TYPE) == (
        JS_REPLICAS,
        KF_INDEX,
        KF_TYPE,
    )
    assert (ranks.LWS_WORKER_INDEX, ranks.KUEUE_POD_GROUP_INDEX, ranks.KUEUE_POD_GROUP_INDEX_LABEL) == (
        LWS,
        KUEUE_INDEX,
        KUEUE_INDEX_LABEL,
    )
    assert (ranks.KUEUE_POD_SET, ranks.KUEUE_POD_INDEX_OFFSET) == (KUEUE_POD_SET, KUEUE_OFFSET)


@pytest.mark.parametrize(
    ("labels", "annotations", "want"),
    [
        pytest.param({}, {JOB: "3"}, RankLabel(JOB, 3), id="Job: the annotation"),
        pytest.param({JOB: "3"}, {}, RankLabel(JOB, 3), id="Job: the label (Kubernetes 1.28+)"),
        pytest.param(
            {JS_INDEX: "1", JS_NAME: "workers", JS_REPLICAS: "2", JOB: "3"},
            {JOB: "3"},
            RankLabel(JS_INDEX, 3, "workers", 1, 2),
            id="JobSet: Job index, completion index, replicated job and its Job count",
        ),
        pytest.param(
            {}, {JS_INDEX: "0", JS_NAME: "w", JOB: "2"}, RankLabel(JS_INDEX, 2, "w", 0, None), id="JobSet: annotations"
        ),
        pytest.param(
            {KF_INDEX: "2", KF_TYPE: "Worker"}, {}, RankLabel(KF_INDEX, 2, "worker"), id="Kubeflow: within its type"
        ),
        pytest.param({LWS: "0"}, {}, RankLabel(LWS, 0, across=True), id="LeaderWorkerSet: leader 0, across pod sets"),
        pytest.param({KUEUE_INDEX: "5"}, {}, RankLabel(KUEUE_INDEX, 5), id="Kueue pod group: its index label"),
        pytest.param(
            {"apps.kubernetes.io/pod-index": "4"},
            {KUEUE_INDEX_LABEL: "apps.kubernetes.io/pod-index"},
            RankLabel("apps.kubernetes.io/pod-index", 4),
            id="Kueue pod group: the label its annotation names",
        ),
        pytest.param({KUEUE_INDEX: "1"}, {JOB: "7"}, RankLabel(KUEUE_INDEX, 1), id="the first source found wins"),
        pytest.param({"app": "x"}, {KUEUE_INDEX_LABEL: "absent"}, None, id="no index"),
    ],
)
def test_each_source_is_read_by_its_own_keys(
    labels: dict[str, str], annotations: dict[str, str], want: RankLabel | None
) -> None:
    assert read_index(pod(labels, annotations)) == want


@pytest.mark.parametrize("value", ["", "x", "-1", "+2", "1e3", " 1", "٣", "1234567890", "0x10"])
@pytest.mark.parametrize("key", [JOB, KF_INDEX, LWS, KUEUE_INDEX])
def test_a_value_that_is_no_whole_number_is_a_reason_not_an_index(key: str, value: str) -> None:
    found = read_index(pod({key: value}, {key: value} if key == JOB else None))
    assert isinstance(found, str) and key in found


def test_a_jobset_pod_without_its_completion_index_says_so() -> None:
    assert read_index(pod({JS_INDEX: "0"})) == f"a JobSet pod without {JOB}"


def shapes(*spec: tuple[str, int, int]) -> tuple[Shape, ...]:
    return tuple(Shape(*s) for s in spec)


@pytest.mark.parametrize(
    ("sets", "labels", "annotations", "gpus", "want"),
    [
        pytest.param(shapes(("main", 8, 4)), {}, {JOB: "5"}, 4, Place("main", 5), id="Job: index 5 is rank 5"),
        pytest.param(
            shapes(("leader", 2, 4), ("workers", 8, 4)),
            {JS_INDEX: "1", JS_NAME: "workers", JS_REPLICAS: "2"},
            {JOB: "2"},
            4,
            Place("workers", 6),  # 8 pods / 2 Jobs = 4 per Job: Job 1's pod 2 is 1 x 4 + 2
            id="JobSet: Job index x pods per Job + completion index",
        ),
        pytest.param(
            shapes(("master", 1, 4), ("worker", 3, 4)),
            {KF_INDEX: "2", KF_TYPE: "Worker"},
            {},
            4,
            Place("worker", 2),
            id="Kubeflow: the pod set named after its type",
        ),
        pytest.param(
            shapes(("master-4", 1, 4), ("worker-4", 3, 4)),
            {KF_INDEX: "0", KF_TYPE: "master"},
            {},
            4,
            Place("master-4", 0),
            id="Kubeflow: a Volcano job's role-and-shape pod set",
        ),
        pytest.param(
            shapes(("worker-4gpu", 2, 4), ("worker-8gpu", 2, 8)),
            {KF_INDEX: "1", KF_TYPE: "worker"},
            {},
            8,
            Place("worker-8gpu", 1),
            id="Kubeflow: the type's pod set of the pod's GPU count",
        ),
        pytest.param(
            shapes(("pods-8gpu", 1, 8), ("pods-4gpu", 3, 4)),
            {LWS: "2"},
            {},
            4,
            Place("pods-4gpu", 1),  # the leader holds 0, so worker 2 is the workers' rank 1
            id="LeaderWorkerSet: worker index across leader and workers",
        ),
        pytest.param(
            shapes(("launcher", 1, 4), ("worker", 3, 4)),
            {KUEUE_POD_SET: "worker", KF_INDEX: "3", KF_TYPE: "worker"},
            {KUEUE_OFFSET: "1"},
            4,
            Place("worker", 2),
            id="Kueue: its podset label and pod-index-offset",
        ),
        pytest.param(shapes(("main", 8, 4)), {}, {JOB: "8"}, 4, "outside pod set main's 8 pods", id="past the set"),
        pytest.param(shapes(("main", 8, 4)), {}, {JOB: "1"}, 8, "no pod set of the gang's plan", id="other GPUs"),
        pytest.param(
            shapes(("a", 2, 4), ("b", 2, 4)), {}, {JOB: "1"}, 4, "no pod set of the gang's plan", id="two could be"
        ),
        pytest.param(
            shapes(("workers", 8, 4)),
            {JS_INDEX: "0", JS_NAME: "workers", JS_REPLICAS: "3"},
            {JOB: "0"},
            4,
            "does not divide pod set workers's 8 pods",
            id="JobSet: replicas that do not divide the pod set",
        ),
        pytest.param(
            shapes(("workers", 8, 4)),
            {JS_INDEX: "0", JS_NAME: "workers", JS_REPLICAS: "2"},
            {JOB: "4"},
            4,
            "past the 4 pods of one Job",
            id="JobSet: a completion index past one Job",
        ),
        pytest.param(shapes(("main", 8, 4)), {}, {JOB: "-1"}, 4, "not a whole number", id="a bad value"),
        pytest.param(shapes(("main", 8, 4)), {}, {}, 4, None, id="no index"),
    ],
)
def test_a_pods_rank_is_found_among_the_gangs_pod_sets(
    sets: tuple[Shape, ...],
    labels: dict[str, str],
    annotations: dict[str, str],
    gpus: int,
    want: Place | str | None,
) -> None:
    found = place_of(pod(labels, annotations, gpus), gpus, sets)
    if isinstance(want, str):
        assert isinstance(found, str) and want in found
    else:
        assert found == want


KEYS = [JOB, JS_INDEX, JS_NAME, JS_REPLICAS, KF_INDEX, KF_TYPE, LWS, KUEUE_INDEX, KUEUE_INDEX_LABEL, KUEUE_POD_SET]
values = st.one_of(st.integers(-3, 20).map(str), st.sampled_from(["", "x", "worker", "main", JOB]), st.text(max_size=8))


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(KEYS), values, max_size=6),
    st.dictionaries(st.sampled_from([*KEYS, KUEUE_OFFSET]), values, max_size=6),
    st.lists(
        st.tuples(st.sampled_from(["main", "worker", "w", "pods-4gpu"]), st.integers(0, 6), st.integers(0, 8)),
        unique_by=lambda t: t[0],  # a gang's pod sets have distinct names
    ),
    st.integers(0, 8),
)
def test_whatever_a_pod_carries_its_place_is_a_rank_inside_a_pod_set_of_its_shape_or_a_reason(
    labels: dict[str, str], annotations: dict[str, str], spec: list[tuple[str, int, int]], gpus: int
) -> None:
    sets = shapes(*spec)
    found = place_of(pod(labels, annotations, gpus), gpus, sets)
    if isinstance(found, Place):
        shape = next(s for s in sets if s.name == found.pod_set)
        assert shape.gpus == gpus and 0 <= found.rank < shape.pods
    else:
        assert found is None or isinstance(found, str)


def test_a_slots_holder_is_gone_once_the_state_holds_it_no_more_or_it_ended() -> None:
    store = ClusterStore()
    store.replace([*cluster_objects(), pod_json("a", 4, node="r1-t10")])
    assert not ranks.is_gone(store, "uid-a")
    store.apply([Event(ADDED, {**pod_json("a", 4, node="r1-t10"), "status": {"phase": "Failed"}})])
    assert ranks.is_gone(store, "uid-a")
    store.apply([Event(DELETED, pod_json("a", 4, node="r1-t10"))])
    assert ranks.is_gone(store, "uid-a")
    store.assume("uid-b", "r1-t11", 4)  # bound by kilter, not shown by the feed yet
    assert not ranks.is_gone(store, "uid-b")

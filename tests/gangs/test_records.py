"""Gang plans recorded in the cluster: a kilter that restarts (or a second one) keeps the gang where the first put it.

The fault tests run ``kilter serve`` on the live feed of the list/watch test
server, stop it after the first pod of a gang is bound, and start a fresh one
on the same cluster. The fleet is cut so that a fresh plan for the rest of
the gang would go elsewhere: racks r1 and r2 have five idle trays each (a
4-pod gang of 4 GPUs fits either, equally well: r1 wins on the name), r3 has
three idle trays, the best fit for the last three pods on their own.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.serve import build_app
from kilter.extenders.server import App
from kilter.gangs import GangBook, GangId, GangPlan, PlanKeys, PlanRecorder, identify
from kilter.gangs.records import PLAN_ANNOTATION, PlanRecord, decode, encode, verifies
from kilter.kube.api import ApiServer
from kilter.model import codec
from kilter.model.core_v1 import Pod
from kilter.state.store import ClusterStore
from tests.extenders.conftest import _Server, cluster_objects, names_args, pod_json, serve_config
from tests.extenders.volcano import payloads as vp
from tests.listwatch import NODES, PODS, ListWatchServer, Resource
from tests.live_mode import kubeconfig
from tests.topology.builders import CLIQUE, node_dict

TOKEN = "plans"
PODGROUPS = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", namespaced=True)
GANG = {"kilter.dev/gang": "train", "kilter.dev/gang-size": "4"}
KEY = "ml/gang/train"
T0 = 1_748_779_200.0  # 2025-06-01T12:00:00Z
KEY_TEXT = "0123456789abcdef" * 4
KEYS = PlanKeys([KEY_TEXT.encode()], source="test")


# ---------------------------------------------------------------------------- the record


def test_a_record_encodes_compactly_signed_for_its_object_and_decodes_back() -> None:
    record = PlanRecord("ml/gang/train", T0, (("gb200-r01-t00", 4), ("gb200-r01-t00", 4), ("gb200-r02-t03", 8)))
    body = (
        '{"v":2,"gang":"ml/gang/train","at":"2025-06-01T12:00:00Z",'
        '"slots":[["gb200-r01-t00",4],["gb200-r01-t00",4],["gb200-r02-t03",8]]}'
    )
    sig = hmac.new(KEY_TEXT.encode(), b"kilter.dev/plan\nuid-1\n" + body.encode(), hashlib.sha256).hexdigest()
    raw = encode(record, keys=KEYS, uid="uid-1")
    assert raw == body[:-1] + f',"sig":"{sig}"}}'
    assert encode(record) == body  # unsigned: what no reader adopts
    decoded = decode(raw, where="test")
    assert decoded == record and decoded is not None and decoded.sig == sig
    assert verifies(decoded, KEYS, ["uid-1"])
    assert not verifies(decoded, KEYS, ["uid-2"])  # copied onto another object
    assert not verifies(decoded, PlanKeys([b"x" * 32], source="other"), ["uid-1"])  # another kilter's key


def test_a_repair_plans_record_says_what_it_replaced_signed_with_the_rest() -> None:
    slots = (("gb200-r01-t00", 4), ("gb200-r01-t16", 4))
    record = PlanRecord(KEY, T0, slots, repaired=((1, "gb200-r01-t01", "same scale-up domain"),))
    raw = encode(record, keys=KEYS, uid="uid-1")
    assert '"slots":[["gb200-r01-t00",4],["gb200-r01-t16",4]],"repaired":[[1,"gb200-r01-t01","same scale-up' in raw
    decoded = decode(raw, where="test")
    assert decoded == record and decoded is not None and verifies(decoded, KEYS, ["uid-1"])
    forged = raw.replace("gb200-r01-t01", "gb200-r09-t09")  # the repair's words are signed too
    assert (again := decode(forged, where="test")) is not None and not verifies(again, KEYS, ["uid-1"])
    plain = PlanRecord(KEY, T0, slots)
    assert "repaired" not in encode(plain, keys=KEYS, uid="uid-1")  # every other record as before


def _raw(**fields: Any) -> str:
    base: dict[str, Any] = {"v": 2, "gang": KEY, "at": "2025-06-01T12:00:00Z", "slots": [["a", 4]]}
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not ...})


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("", id="empty"),
        pytest.param("ml/spans/main", id="not JSON (what the AdmissionCheck once wrote: a plan name)"),
        pytest.param("null", id="null"),
        pytest.param("[]", id="an array"),
        pytest.param("{", id="cut short"),
        pytest.param('{"v":2,"gang":"g","at":"2025-06-01T12:00:00Z","slots":[["a",4]]', id="no closing brace"),
        pytest.param(_raw(v=3), id="a later format version"),
        pytest.param(_raw(v=1), id="format 1, unsigned"),
        pytest.param(_raw(v="2"), id="version as a string"),
        pytest.param(_raw(sig=7), id="signature as a number"),
        pytest.param(_raw(gang=...), id="no gang"),
        pytest.param(_raw(gang=""), id="empty gang"),
        pytest.param(_raw(at="yesterday"), id="time not RFC 3339"),
        pytest.param(_raw(at="2025-06-01T12:00:00"), id="time without a zone"),
        pytest.param(_raw(slots=[]), id="no slots"),
        pytest.param(_raw(slots=[["a", 0]]), id="a slot of 0 GPUs"),
        pytest.param(_raw(slots=[["a", -4]]), id="a slot of -4 GPUs"),
        pytest.param(_raw(slots=[["", 4]]), id="a slot without a node"),
        pytest.param(_raw(slots=[["a", "4"]]), id="GPUs as a string"),
        pytest.param(_raw(slots=[["a", True]]), id="GPUs as a bool"),
        pytest.param(_raw(slots=[["a", 4.5]]), id="fractional GPUs"),
        pytest.param(_raw(slots=[["a", 4, 1]]), id="a slot of three"),
        pytest.param(_raw(slots={"a": 4}), id="slots as an object"),
        pytest.param(_raw(slots=[["a", 2**70]]), id="GPUs beyond 64 bits"),
        pytest.param(_raw(repaired=[[1, "old", "same scale-up domain"]]), id="a repair of a slot past the last"),
        pytest.param(_raw(repaired=[[-1, "old", "same scale-up domain"]]), id="a repair of slot -1"),
        pytest.param(_raw(repaired=[[0, "old", ""]]), id="a repair without its rung"),
        pytest.param(_raw(repaired=[[0, "o" * 254, "same scale-up domain"]]), id="an old node name past 253"),
        pytest.param(_raw(repaired=[[0, "old", "x"]] * 2), id="more repairs than slots"),
        pytest.param(_raw(repaired=[["0", "old", "same scale-up domain"]]), id="a slot as a string"),
        pytest.param(_raw(repaired={"0": "old"}), id="repairs as an object"),
        pytest.param("{" * 10_000, id="deep nesting"),
        pytest.param(
            _raw()[:-1] + ',"x":' + "[" * 100_000 + "]" * 100_000 + "}", id="an unknown field nested 100,000 deep"
        ),
    ],
)
def test_junk_is_no_record_and_never_raises(raw: str) -> None:
    assert decode(raw, where="test") is None


def test_a_time_at_the_edge_of_the_calendar_decodes_and_prints() -> None:
    record = decode(_raw(at="0001-01-01T00:00:00+01:00"), where="test")
    assert record is not None and record.at == "-62135600400 s after 1970"


def test_unknown_fields_are_ignored_so_a_later_writer_may_add_some() -> None:
    record = decode(_raw(note="from a newer kilter"), where="test")
    assert record is not None and record.slots == (("a", 4),)


# ---------------------------------------------------------------------------- the gang book, in process


@dataclass(frozen=True)
class Signed:
    """A record kilter wrote: signed, on each object, for that object's UID."""

    nodes: tuple[str, ...]
    at: float = T0
    gang: str = KEY
    gpus: int = 4
    keys: PlanKeys = KEYS
    uid: str = ""  # sign for this UID instead of the object's (a record copied from elsewhere)

    def on(self, uid: str) -> str:
        record = PlanRecord(self.gang, self.at, tuple((n, self.gpus) for n in self.nodes))
        return encode(record, keys=self.keys, uid=self.uid or uid)


def member(i: int, *, node: str = "", record: Signed | str | None = None) -> dict[str, Any]:
    raw = record.on(f"uid-train-{i}") if isinstance(record, Signed) else record
    return pod_json(f"train-{i}", 4, labels=GANG, annotations={PLAN_ANNOTATION: raw} if raw else None, node=node)


def book_over(*pods: dict[str, Any], hook: list[GangPlan] | None = None) -> tuple[GangBook, ClusterStore]:
    """The gang book over two NVL72 racks (r1-t05 cordoned, r2-t00 full, r2-t01 half used) and ``pods``."""
    store = ClusterStore()
    store.replace([*cluster_objects(), *pods])
    told = hook if hook is not None else []
    book = GangBook(store, wall=lambda: T0 + 10, on_planned=lambda gang, plan: told.append(plan), keys=KEYS)
    return book, store


def plan_of(book: GangBook, store: ClusterStore, pod: dict[str, Any]) -> GangPlan:
    p = codec.convert(pod, Pod)
    gang = identify(p, store)
    assert gang is not None
    plan = book.plan_for(gang, p, 4)
    assert plan is not None and plan.feasible
    return plan


def recorded(nodes: list[str], *, at: float = T0, gang: str = KEY, gpus: int = 4) -> Signed:
    return Signed(tuple(nodes), at, gang, gpus)


R1_PICK = ["r1-t10", "r1-t11", "r1-t12", "r1-t13"]


def test_a_record_on_the_gangs_pods_is_taken_up_and_not_written_again() -> None:
    told: list[GangPlan] = []
    raw = recorded(R1_PICK)
    book, store = book_over(*(member(i, record=raw) for i in range(4)), hook=told)
    plan = plan_of(book, store, member(0, record=raw))
    assert plan.origin == "record" and [s.node for s in plan.slots] == R1_PICK
    assert "recorded at 2025-06-01T12:00:00Z" in plan.plan.reason
    assert told == [] and book.adopted == 1
    fleet = store.fleet()
    assert all(fleet.bitmap.node_free_gpus(fleet.node_index[n]) == 0 for n in R1_PICK)  # reserved


def test_without_a_record_the_plan_is_made_here_and_handed_to_on_planned() -> None:
    told: list[GangPlan] = []
    book, store = book_over(*(member(i) for i in range(4)), hook=told)
    plan = plan_of(book, store, member(0))
    assert plan.origin == "planned" and told == [plan] and book.adopted == 0
    assert plan.pods == ("train-0", "train-1", "train-2", "train-3")  # where the record goes
    assert {s.node for s in plan.slots}.isdisjoint(R1_PICK)  # so the tests above prove the record was used


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(recorded(R1_PICK, at=T0 - 300), id="older than the gang timeout"),
        pytest.param(_raw(at="0001-01-01T00:00:00+01:00", slots=[[n, 4] for n in R1_PICK]), id="from year 1"),
        pytest.param(recorded(R1_PICK, gang="ml/gang/other"), id="naming another gang"),
        pytest.param(recorded(["r1-t10", "r1-t11", "r1-t12", "gone"]), id="a node is gone"),
        pytest.param(recorded(["r1-t10", "r1-t11", "r1-t12", "r1-t05"]), id="a node is cordoned"),
        pytest.param(recorded(["r1-t10", "r1-t11", "r1-t12", "r2-t00"]), id="a node is full"),
        pytest.param(recorded(["r1-t10", "r1-t10", "r1-t12", "r1-t13"]), id="two pods on one 4-GPU node"),
        pytest.param(recorded(["mi-1"] * 4), id="nodes of another GPU kind"),
        pytest.param(recorded(R1_PICK[:3]), id="fewer slots than pods"),
        pytest.param(recorded(R1_PICK, gpus=2), id="slots of another shape"),
        pytest.param("garbage", id="junk"),
        pytest.param(encode(PlanRecord(KEY, T0, tuple((n, 4) for n in R1_PICK))), id="unsigned (a tenant wrote it)"),
        pytest.param(Signed(tuple(R1_PICK), keys=PlanKeys([b"t" * 32], source="tenant")), id="signed with another key"),
        pytest.param(Signed(tuple(R1_PICK), uid="uid-of-another-pod"), id="signed for another object"),
        pytest.param(
            _raw(slots=[[n, 4] for n in R1_PICK])[:-1] + ',"x":' + "[" * 100_000 + "]" * 100_000 + "}",
            id="nested 100,000 deep",
        ),
    ],
)
def test_a_record_that_no_longer_holds_is_ignored_and_the_gang_planned_afresh(raw: Signed | str) -> None:
    told: list[GangPlan] = []
    book, store = book_over(*(member(i, record=raw) for i in range(4)), hook=told)
    plan = plan_of(book, store, member(0, record=raw))
    assert plan.origin == "planned" and told == [plan] and len(plan.slots) == 4


def test_bound_pods_of_the_gang_take_their_slots_and_the_rest_are_reserved() -> None:
    raw = recorded(R1_PICK)
    pods = [member(0, node="r1-t11", record=raw), *(member(i, record=raw) for i in (1, 2, 3))]
    book, store = book_over(*pods)
    plan = plan_of(book, store, member(1, record=raw))
    assert plan.origin == "record"
    assert [(s.node, s.uid) for s in plan.slots] == [
        ("r1-t11", "uid-train-0"),
        *((n, "") for n in R1_PICK if n != "r1-t11"),
    ]
    fleet = store.fleet()
    assert plan.nodes_for("uid-train-2", 4) == sorted(fleet.node_index[n] for n in ("r1-t10", "r1-t12", "r1-t13"))
    assert "1/4 planned pods bound" in plan.describe()


def test_a_record_made_after_a_pod_was_bound_covers_the_other_pods_only() -> None:
    raw = recorded(["r1-t10", "r1-t11", "r1-t12"])
    pods = [member(0, node="r1-t09"), *(member(i, record=raw) for i in (1, 2, 3))]
    book, store = book_over(*pods)
    plan = plan_of(book, store, member(1, record=raw))
    assert plan.origin == "record"
    assert [(s.node, s.uid) for s in plan.slots] == [("r1-t10", ""), ("r1-t11", ""), ("r1-t12", "")]


def test_a_record_on_the_workload_is_read_there() -> None:
    gpus = {"nvidia.com/gpu": "4"}
    container = {"name": "c", "resources": {"requests": gpus, "limits": gpus}}
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "job-train",
            "namespace": "ml",
            "uid": "uid-wl",
            "annotations": {PLAN_ANNOTATION: recorded(R1_PICK, gang="ml/workload/job-train").on("uid-wl")},
        },
        "spec": {
            "queueName": "q",
            "podSets": [{"name": "main", "count": 4, "template": {"spec": {"containers": [container]}}}],
        },
    }
    pods = [pod_json(f"w-{i}", 4, annotations={"kueue.x-k8s.io/workload": "job-train"}) for i in range(4)]
    told: list[GangPlan] = []
    book, store = book_over(workload, *pods, hook=told)
    plan = plan_of(book, store, pods[0])
    assert plan.gang.key == "ml/workload/job-train" and plan.origin == "record"
    assert [s.node for s in plan.slots] == R1_PICK and told == []


# ---------------------------------------------------------------------------- the recorder


def gang_plan(key: str, pods: tuple[str, ...] = ()) -> tuple[GangId, GangPlan]:
    book, store = book_over(*(member(i) for i in range(4)))
    plan = plan_of(book, store, member(0))
    gang = GangId(key, "test", 4)
    plan.gang, plan.pods = gang, pods
    return gang, plan


def test_the_record_goes_on_the_podgroup_the_workload_or_the_pods() -> None:
    recorder = PlanRecorder(ApiServer("http", "127.0.0.1", 1), kueue_version=lambda: "v1beta1")
    try:
        assert recorder.paths("ml/podgroup/train", ()) == [
            "/apis/scheduling.volcano.sh/v1beta1/namespaces/ml/podgroups/train"
        ]
        assert recorder.paths("ml/workload/job-train-1a2b3", ()) == [
            "/apis/kueue.x-k8s.io/v1beta1/namespaces/ml/workloads/job-train-1a2b3"
        ]
        assert recorder.paths("ml/lws/infer/2", ("infer-2", "infer-2-1")) == [
            "/api/v1/namespaces/ml/pods/infer-2",
            "/api/v1/namespaces/ml/pods/infer-2-1",
        ]
    finally:
        recorder.close()
    unversioned = PlanRecorder(ApiServer("http", "127.0.0.1", 1))
    try:
        assert unversioned.paths("ml/workload/w", ()) == ["/apis/kueue.x-k8s.io/v1beta2/namespaces/ml/workloads/w"]
    finally:
        unversioned.close()


def test_the_recorder_patches_only_while_it_is_the_writer_and_never_raises() -> None:
    with ListWatchServer([PODS, NODES]) as cluster:
        cluster.add(pod_json("train-0", 4, labels=GANG))
        api = ApiServer("http", cluster.host, cluster.port)
        writer = [False]
        recorder = PlanRecorder(api, is_writer=lambda: writer[0], wall=lambda: T0, keys=KEYS)
        try:
            gang, plan = gang_plan(KEY, ("train-0", "missing", "unknown"))
            plan.uids = {"train-0": "uid-train-0", "missing": "uid-missing"}  # the state shows no "unknown"
            assert recorder.on_planned(gang, plan) is None  # a follower writes nothing
            writer[0] = True
            written = recorder.on_planned(gang, plan)
            assert written is not None
            written.result()  # the missing pod's 404 is logged, not raised
            assert (recorder.written, recorder.failed, recorder.unknown) == (1, 1, 1)
            notes = cluster.get_object(PODS, "ml", "train-0")["metadata"]["annotations"]
            record = decode(notes[PLAN_ANNOTATION], where="test")
            assert record == PlanRecord(KEY, T0, tuple((s.node, s.gpus) for s in plan.slots))
            assert verifies(record, KEYS, ["uid-train-0"])
            patches = [r for r in cluster.requests if r.method == "PATCH"]
            assert [r.path for r in patches] == [
                "/api/v1/namespaces/ml/pods/train-0",
                "/api/v1/namespaces/ml/pods/missing",
            ]
        finally:
            recorder.close()


WORKLOADS = Resource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload", namespaced=True)


def test_the_record_of_a_kueue_gang_is_a_merge_patch_of_its_workloads_annotations() -> None:
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "job-train", "namespace": "ml", "annotations": {"team": "nlp"}},
        "spec": {"queueName": "research", "podSets": []},
    }
    with ListWatchServer([PODS, NODES, WORKLOADS]) as cluster:
        cluster.add(workload)
        uid = cluster.get_object(WORKLOADS, "ml", "job-train")["metadata"]["uid"]
        recorder = PlanRecorder(ApiServer("http", cluster.host, cluster.port), wall=lambda: T0, keys=KEYS)
        try:
            gang, plan = gang_plan("ml/workload/job-train")
            plan.uids = {"job-train": uid}
            written = recorder.on_planned(gang, plan)
            assert written is not None
            written.result()
        finally:
            recorder.close()
        stored = cluster.get_object(WORKLOADS, "ml", "job-train")
        notes = stored["metadata"]["annotations"]
        assert notes["team"] == "nlp", "a merge patch keeps the Workload's other annotations"
        record = decode(notes[PLAN_ANNOTATION], where="test")
        assert record is not None and verifies(record, KEYS, [uid])
        assert stored["spec"] == workload["spec"]
        assert [(r.method, r.path) for r in cluster.requests if r.method != "GET"] == [
            ("PATCH", "/apis/kueue.x-k8s.io/v1beta2/namespaces/ml/workloads/job-train")
        ]


# ---------------------------------------------------------------------------- fault tests: kilter restarts


def fleet() -> list[dict[str, Any]]:
    """r1, r2: five idle 4-GPU trays each; r3: four trays, one busy."""
    nodes = [
        node_dict(f"{rack}-t{t}", labels={CLIQUE: rack})
        for rack, trays in (("r1", 5), ("r2", 5), ("r3", 4))
        for t in range(trays)
    ]
    return [*nodes, pod_json("busy", 4, node="r3-t3")]


NODE_NAMES = [n["metadata"]["name"] for n in fleet() if n["kind"] == "Node"]


@dataclass
class Kilter:
    app: App
    store: ClusterStore
    port: int

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            raw_body = None if body is None else json.dumps(body).encode()
            conn.request(method, path, raw_body, {"Content-Type": "application/json"} if body is not None else {})
            response = conn.getresponse()
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
        finally:
            conn.close()

    def passing(self, pod: dict[str, Any]) -> list[str]:
        status, answer = self.call("POST", "/scheduler/filter", names_args(pod, NODE_NAMES))
        assert status == 200 and answer["Error"] == "", answer
        return sorted(answer["NodeNames"])

    def predicate_passing(self, task: dict[str, Any]) -> list[str]:
        out = []
        for name in NODE_NAMES:
            node = vp.node_info(name, gpus=4, labels={CLIQUE: name.split("-")[0]})
            status, answer = self.call("POST", "/volcano/predicate", vp.predicate_args(task, node))
            assert status == 200, answer
            if answer["code"] == 0:
                out.append(name)
        return out


def wait_for(what: str, ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 15
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def key_file(tmp_path: Path) -> Path:
    """The plan keys every kilter of a test shares (``--plan-key-file``): KEYS, after a key being rotated out."""
    path = tmp_path / "plan-keys"
    if not path.exists():
        path.write_text(f"{KEY_TEXT}\n\n{'f' * 64}\n")
    return path


@contextmanager
def kilter(cluster: ListWatchServer, tmp_path: Path, name: str, *, keys: bool = True) -> Iterator[Kilter]:
    """``kilter serve --kubeconfig`` on the cluster, once its feed has listed everything; with the shared plan key
    file, or (``keys=False``) without one."""
    config = serve_config(
        None,
        kubeconfig=kubeconfig(tmp_path / f"{name}.kubeconfig", cluster.port, TOKEN),
        plan_key_file=key_file(tmp_path) if keys else None,
    )
    app, store = build_app(config)
    with _Server(app, None) as port:
        k = Kilter(app, store, port)
        wait_for(f"{name} to be ready", lambda: k.call("GET", "/readyz")[0] == 200)
        yield k


def record_on(cluster: ListWatchServer, resource: Resource, name: str) -> PlanRecord | None:
    notes = cluster.get_object(resource, "ml", name)["metadata"].get("annotations") or {}
    raw = notes.get(PLAN_ANNOTATION)
    return decode(raw, where="test") if raw else None


def bind(cluster: ListWatchServer, name: str, node: str) -> None:
    """What the binding does to the pod: spec.nodeName set (kept: everything else, the record included)."""
    pod = cluster.get_object(PODS, "ml", name)
    pod["spec"]["nodeName"] = node
    pod["status"]["phase"] = "Running"
    cluster.update(pod)


def test_a_restarted_kilter_keeps_the_rest_of_the_gang_on_the_recorded_plan(tmp_path: Path) -> None:
    pods = [pod_json(f"train-{i}", 4, labels=GANG) for i in range(4)]
    with ListWatchServer([PODS, NODES], token=TOKEN) as cluster:
        for obj in [*fleet(), *pods]:
            cluster.add(obj)
        with kilter(cluster, tmp_path, "kilter-1") as first:
            offered = first.passing(pods[0])
            plan = first.app.extender.gangs.plan_of(KEY)
            assert plan is not None
            planned = [s.node for s in plan.slots]
            assert offered == sorted(planned) and len(planned) == 4 and {n[:2] for n in planned} == {"r1"}
            wait_for(
                "the record on every pod", lambda: all(record_on(cluster, PODS, p["metadata"]["name"]) for p in pods)
            )
            record = record_on(cluster, PODS, "train-2")
            assert record is not None and record.gang == KEY and [n for n, _ in record.slots] == planned
            bind(cluster, "train-0", offered[0])
        rest = sorted(set(planned) - {offered[0]})
        with kilter(cluster, tmp_path, "kilter-2") as second:
            seen = second.store.pod("uid-train-0")
            assert seen is not None and seen.spec.node_name == offered[0]
            for pod in pods[1:]:
                assert second.passing(pod) == rest
            adopted = second.app.extender.gangs.plan_of(KEY)
            assert adopted is not None
            assert adopted.origin == "record" and second.app.extender.gangs.adopted == 1
            assert {s.node for s in adopted.slots} == set(planned)
        # Without the record, a fresh kilter repairs the gang beside train-0 by its own choice: a repair, not the plan.
        bare = ClusterStore()
        bare.replace([*fleet(), pod_json("train-0", 4, labels=GANG, node=offered[0]), *pods[1:]])
        fresh = plan_of(GangBook(bare), bare, pods[1])
        assert fresh.origin == "repair" and {s.node[:2] for s in fresh.slots} == {"r1"}


def test_a_record_whose_nodes_are_gone_is_ignored_and_the_new_plan_recorded(tmp_path: Path) -> None:
    stale = recorded(["gone-0", "gone-1", "gone-2", "gone-3"], at=time.time())
    pods = [member(i, record=stale) for i in range(4)]
    with ListWatchServer([PODS, NODES], token=TOKEN) as cluster:
        for obj in [*fleet(), *pods]:
            cluster.add(obj)
        with kilter(cluster, tmp_path, "kilter") as k:
            offered = k.passing(pods[0])
            plan = k.app.extender.gangs.plan_of(KEY)
            assert plan is not None
            assert plan.origin == "planned" and offered == sorted(s.node for s in plan.slots)

            def rewritten() -> bool:
                record = record_on(cluster, PODS, "train-3")
                return record is not None and [n for n, _ in record.slots] == [s.node for s in plan.slots]

            wait_for("the new plan's record", rewritten)


def test_a_restarted_kilter_holds_the_volcano_gangs_other_tasks_to_the_plan_on_the_podgroup(tmp_path: Path) -> None:
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"minMember": 4, "queue": "default"},
        "status": {"phase": "Inqueue"},
    }
    pods = [
        {"apiVersion": "v1", "kind": "Pod", **vp.pod("ml", f"train-{i}", f"uid-train-{i}", gpus=4, group="train")}
        for i in range(4)
    ]
    with ListWatchServer([PODS, NODES, PODGROUPS], token=TOKEN) as cluster:
        for obj in [*fleet(), group, *pods]:
            cluster.add(obj)
        with kilter(cluster, tmp_path, "kilter-1") as first:
            offered = first.predicate_passing(vp.task_info(pods[0]))
            plan = first.app.extender.gangs.plan_of("ml/podgroup/train")
            assert plan is not None
            planned = [s.node for s in plan.slots]
            assert sorted(offered) == sorted(planned) and {n[:2] for n in planned} == {"r1"}
            wait_for("the record on the PodGroup", lambda: record_on(cluster, PODGROUPS, "train") is not None)
            record = record_on(cluster, PODGROUPS, "train")
            assert record is not None and [n for n, _ in record.slots] == planned
            assert all(record_on(cluster, PODS, p["metadata"]["name"]) is None for p in pods)  # the owner holds it
            bind(cluster, "train-0", offered[0])
        with kilter(cluster, tmp_path, "kilter-2") as second:
            for pod in pods[1:]:
                assert second.predicate_passing(vp.task_info(pod)) == sorted(set(planned) - {offered[0]})
            assert (p := second.app.extender.gangs.plan_of("ml/podgroup/train")) is not None and p.origin == "record"

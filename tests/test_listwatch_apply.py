"""The list/watch test server's server-side apply and status subresource answer as kube-apiserver does for what
kilter's AdmissionCheck controller writes: apply to ``workloads/NAME/status`` and ``admissionchecks/NAME/status``,
entries merged by key, managers' fields in ``metadata.managedFields``, conflicts, ``force``, and the status
strategy (a ``/status`` write changes only the status, the object's writes keep it).

Requests go over HTTP to 127.0.0.1 as ``listwatch-tests`` (kilter's ``ApiServer`` for kilter's own call shape,
a raw connection where a test reads a Status's causes), so none counts as a call of ``kilter serve``.
"""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest

from kilter.kube.api import ApiServer
from tests.listwatch import APPLY_PATCH, MERGE_PATCH, ListWatchServer, Resource

Obj = dict[str, Any]
TOKEN = "apply"
AGENT = "listwatch-tests"
API = "kueue.x-k8s.io/v1beta2"
WORKLOADS = Resource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload", namespaced=True, status=True)
CHECKS = Resource("kueue.x-k8s.io", "v1beta2", "admissionchecks", "AdmissionCheck", namespaced=False, status=True)
QUEUES = Resource("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue", namespaced=True)  # no status subresource
COLLECTION = f"/apis/{API}/namespaces/ml/workloads"
WORKLOAD = f"{COLLECTION}/train"
STATUS = f"{WORKLOAD}/status"
CHECK_STATUS = f"/apis/{API}/admissionchecks/kilter-topology/status"
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
KILTER = "kilter.dev/topology"
T0, T1 = "2026-03-01T10:00:00Z", "2026-03-01T10:05:00Z"


@pytest.fixture
def cluster() -> Iterator[ListWatchServer]:
    with ListWatchServer([WORKLOADS, CHECKS, QUEUES], token=TOKEN) as server:
        yield server


@pytest.fixture
def api(cluster: ListWatchServer) -> ApiServer:
    return ApiServer("http", cluster.host, cluster.port, {"Authorization": f"Bearer {TOKEN}"}, user_agent=AGENT)


def a_workload(**status: Any) -> Obj:
    """A Workload as Kueue creates it; ``status`` given as the test seeds it (Kueue's writes, not tracked)."""
    obj: Obj = {
        "apiVersion": API,
        "kind": "Workload",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"queueName": "team-a", "podSets": [{"name": "main", "count": 4}]},
    }
    if status:
        obj["status"] = status
    return obj


def entry(name: str, state: str, *, message: str = "", since: str = T0, **more: Any) -> Obj:
    """One ``status.admissionChecks[]`` item."""
    return {"name": name, "state": state, "lastTransitionTime": since, "message": message, **more}


def status_body(*entries: Obj, **more: Any) -> Obj:
    """An apply of ``workloads/train/status`` naming these admission check entries, as kilter's ``apply_body``."""
    return {
        "apiVersion": API,
        "kind": "Workload",
        "metadata": {"name": "train", "namespace": "ml"},
        "status": {"admissionChecks": list(entries)},
        **more,
    }


def send(
    cluster: ListWatchServer, method: str, path: str, body: Obj | bytes, content_type: str = APPLY_PATCH
) -> tuple[int, Obj]:
    """One request on a fresh connection: (status, decoded answer), a Status included."""
    conn = http.client.HTTPConnection(cluster.host, cluster.port, timeout=5)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": content_type,
        "Accept": "application/json",
        "User-Agent": AGENT,
    }
    try:
        conn.request(method, path, data, headers)
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        conn.close()


def apply(
    cluster: ListWatchServer, path: str, body: Obj | bytes, manager: str, *, force: bool = False
) -> tuple[int, Obj]:
    query = {"fieldManager": manager, **({"force": "true"} if force else {})}
    return send(cluster, "PATCH", f"{path}?{urlencode(query)}", body)


def applied(cluster: ListWatchServer, path: str, body: Obj, manager: str, *, force: bool = False) -> Obj:
    """The object an apply that must succeed answers."""
    code, obj = apply(cluster, path, body, manager, force=force)
    assert code == 200, obj
    return obj


def checks(obj: Obj) -> list[Obj]:
    return list((obj.get("status") or {}).get("admissionChecks") or [])


def managers(obj: Obj) -> dict[str, Obj]:
    """managedFields by manager name."""
    return {m["manager"]: m for m in obj["metadata"].get("managedFields") or []}


def owned(obj: Obj, manager: str, name: str) -> Obj:
    """What ``manager`` owns of the admission check entry ``name`` (its fieldsV1 node), {} when nothing."""
    fields = managers(obj).get(manager, {}).get("fieldsV1", {})
    node: Obj = fields.get("f:status", {}).get("f:admissionChecks", {}).get(f'k:{{"name":"{name}"}}', {})
    return node


def test_two_managers_applying_different_entries_keep_each_others_entries(cluster: ListWatchServer) -> None:
    # listType=map keyed by name: an apply names only its own entry and the other's stays; as an atomic list,
    # the second apply would replace the first's entry.
    cluster.add(a_workload())
    applied(cluster, STATUS, status_body(entry("kilter-topology", "Pending")), "kilter")
    both = applied(cluster, STATUS, status_body(entry("provisioning", "Pending")), "provisioner")
    assert [c["name"] for c in checks(both)] == ["kilter-topology", "provisioning"]
    again = applied(cluster, STATUS, status_body(entry("kilter-topology", "Ready", message="planned")), "kilter")
    assert checks(again) == [entry("kilter-topology", "Ready", message="planned"), entry("provisioning", "Pending")]
    assert set(managers(again)) == {"kilter", "provisioner"}
    assert owned(again, "kilter", "kilter-topology") and not owned(again, "kilter", "provisioning")
    assert owned(again, "provisioner", "provisioning") and not owned(again, "provisioner", "kilter-topology")
    assert cluster.objects(WORKLOADS)[0] == again


def test_what_a_manager_stops_applying_goes_unless_another_manager_owns_it(cluster: ListWatchServer) -> None:
    cluster.add(a_workload())
    shared = entry("shared", "Ready", message="both say so")
    applied(cluster, STATUS, status_body(entry("kilter-topology", "Ready", message="planned"), shared), "kilter")
    applied(cluster, STATUS, status_body(entry("provisioning", "Pending"), shared), "provisioner")
    # kilter drops the message of its entry: that field alone goes, the entry stays.
    mine = {k: v for k, v in entry("kilter-topology", "Ready").items() if k != "message"}
    less = applied(cluster, STATUS, status_body(mine, shared), "kilter")
    assert checks(less)[0] == mine
    assert "f:message" not in owned(less, "kilter", "kilter-topology")
    # kilter drops its entry and the shared one: its own goes, the shared one stays (provisioner owns it too).
    gone = applied(cluster, STATUS, status_body(), "kilter")
    assert [c["name"] for c in checks(gone)] == ["provisioning", "shared"]
    assert checks(gone)[1] == shared
    assert set(managers(gone)) == {"provisioner"}  # kilter owns nothing now: its entry is gone


def test_applied_entries_merge_into_the_stored_ones_in_structured_merge_diffs_order(cluster: ListWatchServer) -> None:
    # An applied item merges into the stored item of its key (the fields it does not name stay); the order is
    # structured-merge-diff's (its own test: [a, b, c] merged with [c, a] is [b, c, a]), not the apply's.
    stored = [entry(name, "Pending", message=f"{name} waits") for name in ("a", "b", "c")]
    cluster.add(a_workload(admissionChecks=stored))
    named = [{"name": "c", "state": "Pending"}, {"name": "a", "state": "Pending"}]
    wrote = applied(cluster, STATUS, status_body(*named), "sorter")
    assert checks(wrote) == [stored[1], stored[2], stored[0]]
    assert set(owned(wrote, "sorter", "a")) == {".", "f:name", "f:state"}


def test_a_changed_field_another_manager_owns_is_a_conflict_and_force_takes_it_over(
    cluster: ListWatchServer,
) -> None:
    cluster.add(a_workload())
    before = applied(cluster, STATUS, status_body(entry("kilter-topology", "Ready", message="planned")), KILTER)
    field = '.status.admissionChecks[name="kilter-topology"]'
    code, status = apply(cluster, STATUS, status_body(entry("kilter-topology", "Retry", message="planned")), "kueue")
    assert code == 409 and status["reason"] == "Conflict"
    assert status["message"] == (
        f'Apply failed with 1 conflict: conflict with "{KILTER}" with subresource "status": {field}.state'
    )
    assert status["details"] == {
        "causes": [
            {
                "reason": "FieldManagerConflict",
                "message": f'conflict with "{KILTER}" with subresource "status"',
                "field": f"{field}.state",
            }
        ]
    }
    code, status = apply(cluster, STATUS, status_body(entry("kilter-topology", "Retry", message="no")), "kueue")
    assert code == 409 and status["message"] == (
        f'Apply failed with 2 conflicts: conflicts with "{KILTER}" with subresource "status":\n'
        f"- {field}.message\n- {field}.state"
    )
    assert cluster.objects(WORKLOADS)[0] == before  # refused: nothing written
    # The same values are no conflict: both own them.
    same = applied(cluster, STATUS, status_body(entry("kilter-topology", "Ready", message="planned")), "kueue")
    assert "f:state" in owned(same, "kueue", "kilter-topology") and "f:state" in owned(same, KILTER, "kilter-topology")
    # force: the applier's values win and the fields leave the other manager's set.
    forced = applied(cluster, STATUS, status_body(entry("kilter-topology", "Retry", message="no")), "kueue", force=True)
    assert checks(forced) == [entry("kilter-topology", "Retry", message="no")]
    assert set(owned(forced, KILTER, "kilter-topology")) == {".", "f:lastTransitionTime", "f:name"}
    assert {"f:state", "f:message"} <= set(owned(forced, "kueue", "kilter-topology"))
    # ... so now kilter, reapplying its old values without force, is the one in conflict.
    code, status = apply(cluster, STATUS, status_body(entry("kilter-topology", "Ready", message="planned")), KILTER)
    assert code == 409 and 'conflicts with "kueue" with subresource "status":' in status["message"]


def test_managed_fields_have_the_apiservers_shape(cluster: ListWatchServer, api: ApiServer) -> None:
    cluster.add(a_workload())
    cluster.add({"apiVersion": API, "kind": "AdmissionCheck", "metadata": {"name": "kilter-topology"}})
    update = {"name": "main", "annotations": {"kilter.dev/plan": "{}"}, "nodeSelector": {"rack": "r1"}}
    body = status_body(entry("kilter-topology", "Ready", message="planned", podSetUpdates=[update]))
    wrote = api.apply(STATUS, body, field_manager=KILTER)  # kilter's own call: force=true
    [mine] = wrote["metadata"]["managedFields"]
    assert TIME.fullmatch(mine.pop("time"))
    assert list(mine) == ["manager", "operation", "apiVersion", "fieldsType", "fieldsV1", "subresource"]
    assert mine == {
        "manager": KILTER,
        "operation": "Apply",
        "apiVersion": API,
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:status": {
                "f:admissionChecks": {
                    'k:{"name":"kilter-topology"}': {
                        ".": {},
                        "f:lastTransitionTime": {},
                        "f:message": {},
                        "f:name": {},
                        "f:podSetUpdates": {},  # listType=atomic in Kueue's CRD: owned whole
                        "f:state": {},
                    }
                }
            }
        },
        "subresource": "status",
    }
    trie = mine["fieldsV1"]["f:status"]["f:admissionChecks"]['k:{"name":"kilter-topology"}']
    assert list(trie) == [".", "f:lastTransitionTime", "f:message", "f:name", "f:podSetUpdates", "f:state"]
    condition = {
        "type": "Active",
        "status": "True",
        "reason": "Active",
        "message": "kilter plans",
        "lastTransitionTime": T0,
    }
    check = {"apiVersion": API, "kind": "AdmissionCheck", "metadata": {"name": "kilter-topology"}}
    active = api.apply(CHECK_STATUS, {**check, "status": {"conditions": [condition]}}, field_manager=KILTER)
    assert active["status"] == {"conditions": [condition]}
    [entry_] = active["metadata"]["managedFields"]
    assert (entry_["operation"], entry_["subresource"], entry_["fieldsV1"]) == (
        "Apply",
        "status",
        {
            "f:status": {
                "f:conditions": {
                    'k:{"type":"Active"}': {
                        ".": {},
                        "f:lastTransitionTime": {},
                        "f:message": {},
                        "f:reason": {},
                        "f:status": {},
                        "f:type": {},
                    }
                }
            }
        },
    )


def test_an_object_without_managed_fields_is_owned_by_before_first_apply(
    cluster: ListWatchServer, api: ApiServer
) -> None:
    # Kueue wrote the Pending entry and a condition before anyone applied: at the first apply those fields become
    # the before-first-apply manager's, so changing them is a conflict, which kilter's force=true takes over.
    ready = {
        "type": "QuotaReserved",
        "status": "True",
        "reason": "QuotaReserved",
        "message": "",
        "lastTransitionTime": T0,
    }
    cluster.add(a_workload(admissionChecks=[entry("kilter-topology", "Pending")], conditions=[ready]))
    planned = status_body(entry("kilter-topology", "Ready", message="planned", since=T1))
    code, status = apply(cluster, STATUS, planned, KILTER)
    assert code == 409
    first = rf'"before-first-apply" with subresource "status" using {API} at {TIME.pattern}'
    field = '.status.admissionChecks[name="kilter-topology"]'
    lines = [f"- {field}.{f}" for f in ("lastTransitionTime", "message", "state")]
    assert re.fullmatch(
        rf"Apply failed with 3 conflicts: conflicts with {first}:\n" + re.escape("\n".join(lines)), status["message"]
    )
    assert cluster.objects(WORKLOADS)[0]["metadata"].get("managedFields") is None  # refused: nothing recorded
    wrote = api.apply(STATUS, planned, field_manager=KILTER)
    assert checks(wrote) == [entry("kilter-topology", "Ready", message="planned", since=T1)]
    assert wrote["status"]["conditions"] == [ready]
    kueue = managers(wrote)["before-first-apply"]
    assert (kueue["operation"], kueue["subresource"], kueue["apiVersion"]) == ("Update", "status", API)
    assert TIME.fullmatch(kueue["time"])
    assert set(owned(wrote, "before-first-apply", "kilter-topology")) == {".", "f:name"}  # the rest moved to kilter
    assert 'k:{"type":"QuotaReserved"}' in kueue["fieldsV1"]["f:status"]["f:conditions"]
    assert "f:spec" not in kueue["fieldsV1"]  # spec is no field of the status endpoint
    assert [m["operation"] for m in wrote["metadata"]["managedFields"]] == ["Apply", "Update"]


def test_an_apply_that_changes_nothing_writes_nothing(cluster: ListWatchServer, api: ApiServer) -> None:
    cluster.add(a_workload())
    body = status_body(entry("kilter-topology", "Ready", message="planned"))
    first = api.apply(STATUS, body, field_manager=KILTER)
    version = cluster.resource_version
    assert first["metadata"]["resourceVersion"] == str(version)
    watch, events = api.stream(f"{COLLECTION}?watch=1&resourceVersion={version}", timeout_s=5.0)
    try:
        assert api.apply(STATUS, body, field_manager=KILTER) == first
        assert applied(cluster, STATUS, body, KILTER) == first  # without force alike
        assert cluster.resource_version == version
        changed = api.apply(STATUS, status_body(entry("kilter-topology", "Retry")), field_manager=KILTER)
        assert changed["metadata"]["resourceVersion"] == str(version + 1)
        event = json.loads(events.readline())  # the first event after ``version``: no write came before it
        assert (event["type"], event["object"]) == ("MODIFIED", changed)
    finally:
        watch.close()


def test_a_status_apply_changes_only_the_status(cluster: ListWatchServer) -> None:
    stored = cluster.add(a_workload())
    body = status_body(
        entry("kilter-topology", "Ready"),
        spec={"queueName": "elsewhere"},
        metadata={"name": "train", "namespace": "ml", "labels": {"team": "b"}},
    )
    wrote = applied(cluster, STATUS, body, KILTER)
    assert wrote["spec"] == stored["spec"] and "labels" not in wrote["metadata"]
    assert checks(wrote) == [entry("kilter-topology", "Ready")]
    assert "f:spec" not in managers(wrote)[KILTER]["fieldsV1"]
    assert send(cluster, "GET", STATUS, b"")[1] == wrote  # GET of /status answers the object


def test_puts_and_merge_patches_keep_to_their_side_of_the_status(cluster: ListWatchServer) -> None:
    cluster.add(a_workload(admissionChecks=[entry("kilter-topology", "Pending")]))
    applied(cluster, STATUS, status_body(entry("kilter-topology", "Ready")), KILTER, force=True)
    # through /status: only the status changes (spec and labels stay), managedFields kept
    code, patched = send(
        cluster,
        "PATCH",
        STATUS,
        {"spec": {"queueName": "x"}, "metadata": {"labels": {"a": "b"}}, "status": {"conditions": []}},
        MERGE_PATCH,
    )
    assert code == 200 and patched["spec"]["queueName"] == "team-a" and "labels" not in patched["metadata"]
    assert patched["status"]["conditions"] == [] and set(managers(patched)) == {KILTER, "before-first-apply"}
    put = {**patched, "spec": {"queueName": "y"}, "status": {"admissionChecks": []}}
    code, replaced = send(cluster, "PUT", STATUS, put, "application/json")
    assert code == 200 and replaced["spec"]["queueName"] == "team-a" and replaced["status"] == {"admissionChecks": []}
    # through the object: all but the status changes, the stored status stays, managedFields kept
    code, main = send(cluster, "PATCH", WORKLOAD, {"spec": {"queueName": "z"}, "status": None}, MERGE_PATCH)
    assert code == 200 and main["spec"]["queueName"] == "z" and main["status"] == {"admissionChecks": []}
    assert main["metadata"]["managedFields"] == replaced["metadata"]["managedFields"]
    no_fields = {**main, "metadata": {k: v for k, v in main["metadata"].items() if k != "managedFields"}}
    code, put_main = send(cluster, "PUT", WORKLOAD, {**no_fields, "status": {"x": 1}}, "application/json")
    assert code == 200 and put_main["status"] == {"admissionChecks": []}
    assert put_main["metadata"]["managedFields"] == main["metadata"]["managedFields"]  # a writer that lacks them


def test_apply_needs_a_field_manager_and_force_is_for_apply_only(cluster: ListWatchServer) -> None:
    # PatchOptions are validated before the object is looked up: the Workload does not exist.
    code, status = send(cluster, "PATCH", f"{STATUS}?force=true", status_body())
    assert (code, status["reason"]) == (422, "Invalid")
    assert (
        status["message"]
        == 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'
    )
    assert status["details"] == {
        "group": "meta.k8s.io",
        "kind": "PatchOptions",
        "causes": [
            {
                "reason": "FieldValueRequired",
                "message": "Required value: is required for apply patch",
                "field": "fieldManager",
            }
        ],
    }
    code, status = send(cluster, "PATCH", f"{WORKLOAD}?force=false", {"spec": {}}, MERGE_PATCH)
    assert (code, status["message"]) == (
        422,
        'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch',
    )


def test_other_patch_types_answer_as_before(cluster: ListWatchServer) -> None:
    stored = cluster.add(a_workload())
    code, patched = send(
        cluster, "PATCH", WORKLOAD, {"metadata": {"annotations": {"kilter.dev/plan": "{}"}}}, MERGE_PATCH
    )
    assert code == 200 and patched["metadata"]["annotations"] == {"kilter.dev/plan": "{}"}
    assert "managedFields" not in patched["metadata"]  # a merge patch tracks no manager
    assert int(patched["metadata"]["resourceVersion"]) == int(stored["metadata"]["resourceVersion"]) + 1
    code, status = send(cluster, "PATCH", WORKLOAD, [{"op": "add"}], "application/json-patch+json")  # type: ignore[arg-type]
    assert (code, status["reason"]) == (415, "UnsupportedMediaType")
    assert status["message"].endswith(
        "accepted media types include: application/merge-patch+json, application/apply-patch+yaml"
    )


def test_an_apply_to_an_absent_object_creates_it_but_never_through_status(cluster: ListWatchServer) -> None:
    code, status = apply(cluster, STATUS, status_body(entry("kilter-topology", "Ready")), KILTER, force=True)
    assert (code, status["reason"], status["message"]) == (
        404,
        "NotFound",
        'workloads.kueue.x-k8s.io "train" not found',
    )
    assert cluster.objects(WORKLOADS) == []
    start = cluster.resource_version
    created_body = {**a_workload(admissionChecks=[entry("kilter-topology", "Ready")]), "spec": {"queueName": "q"}}
    code, created = apply(cluster, WORKLOAD, created_body, "creator")
    assert code == 201 and created["spec"] == {"queueName": "q"}
    assert "status" not in created  # a create cannot set the status where the subresource serves it
    assert created["metadata"]["uid"] and TIME.fullmatch(created["metadata"]["creationTimestamp"])
    [manager] = created["metadata"]["managedFields"]
    assert "subresource" not in manager and manager["fieldsV1"] == {"f:spec": {"f:queueName": {}}}
    assert created["metadata"]["resourceVersion"] == str(start + 1) == str(cluster.resource_version)
    code, queue = apply(
        cluster,
        f"/apis/{API}/namespaces/ml/localqueues/team-a/status",
        {"apiVersion": API, "kind": "LocalQueue", "metadata": {"name": "team-a"}},
        KILTER,
    )
    assert code == 404 and queue["message"] == "the server could not find the requested resource"  # no subresource


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        pytest.param({**status_body(), "kind": "Job"}, 400, f"invalid object type: {API}, Kind=Job", id="another kind"),
        pytest.param({"metadata": {"name": "train"}, "status": {}}, 400, "invalid object type: /, Kind=", id="no kind"),
        pytest.param(
            {**status_body(), "apiVersion": "kueue.x-k8s.io/v1beta1"},
            400,
            "invalid object type: kueue.x-k8s.io/v1beta1, Kind=Workload",
            id="another version",
        ),
        pytest.param(
            {**status_body(), "metadata": {"name": "other"}},
            400,
            "the name of the object (other) does not match the name on the URL (train)",
            id="another name",
        ),
        pytest.param(
            {**status_body(), "metadata": {"name": "train", "namespace": "elsewhere"}},
            400,
            "the namespace of the provided object does not match the namespace sent on the request",
            id="another namespace",
        ),
        pytest.param(
            {**status_body(), "metadata": {"name": "train", "managedFields": []}},
            400,
            "metadata.managedFields must be nil",
            id="managed fields",
        ),
        pytest.param(
            {**status_body(), "metadata": {"name": "train", "resourceVersion": "1"}},
            409,
            'Operation cannot be fulfilled on workloads.kueue.x-k8s.io "train": the object has been modified; '
            "please apply your changes to the latest version and try again",
            id="a stale resourceVersion",
        ),
        pytest.param(
            status_body(entry("a", "Ready"), entry("a", "Retry")),
            500,
            "failed to create typed patch object (ml/train; kueue.x-k8s.io/v1beta2, Kind=Workload): "
            '.status.admissionChecks: duplicate entries for key [name="a"]',
            id="a key twice",
        ),
        pytest.param(
            status_body({"state": "Ready"}),
            500,
            "failed to create typed patch object (ml/train; kueue.x-k8s.io/v1beta2, Kind=Workload): "
            ".status.admissionChecks: element 0: associative list with keys has an element that omits all key "
            'fields ["name"] (and doesn\'t have default values for any key fields)',
            id="an item without its key",
        ),
        pytest.param(
            {**status_body(), "status": {"admissionChecks": ["kilter-topology"]}},
            500,
            "failed to create typed patch object (ml/train; kueue.x-k8s.io/v1beta2, Kind=Workload): "
            ".status.admissionChecks: element 0: associative list with keys may not have non-map elements",
            id="an item that is no map",
        ),
        pytest.param(
            b"- not\n- a map\n",
            400,
            "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal array into "
            "Go value of type map[string]interface {}",
            id="not a map",
        ),
    ],
)
def test_applies_the_apiserver_refuses_are_refused_and_write_nothing(
    cluster: ListWatchServer, body: Obj | bytes, code: int, message: str
) -> None:
    stored = cluster.add(a_workload())
    got, status = apply(cluster, STATUS, body, KILTER, force=True)
    assert (got, status["message"]) == (code, message)
    assert cluster.objects(WORKLOADS) == [stored]


def test_an_apply_body_may_be_yaml(cluster: ListWatchServer) -> None:
    cluster.add(a_workload())
    yaml_body = (
        f"apiVersion: {API}\nkind: Workload\nmetadata:\n  name: train\n  namespace: ml\nstatus:\n  admissionChecks:\n"
        f"  - name: kilter-topology\n    state: Ready\n    lastTransitionTime: {T0}\n    message: ''\n"
    ).encode()
    code, wrote = apply(cluster, STATUS, yaml_body, KILTER)
    assert code == 200 and checks(wrote) == [entry("kilter-topology", "Ready")]  # the timestamp stays a string


def test_discovery_lists_the_status_subresource(cluster: ListWatchServer) -> None:
    code, found = send(cluster, "GET", f"/apis/{API}", b"")
    assert code == 200
    listed = {r["name"]: r for r in found["resources"]}
    assert listed["workloads/status"] == {
        "name": "workloads/status",
        "singularName": "",
        "namespaced": True,
        "kind": "Workload",
        "verbs": ["get", "patch", "update"],
    }
    assert "admissionchecks/status" in listed and "localqueues/status" not in listed

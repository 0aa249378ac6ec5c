"""The RBAC of kilter beside kube-scheduler (config/base, config/components/scheduler-extender and
kueue-admission-check): the ServiceAccount kilter-scheduler holds exactly the API access kilter's code uses.

The requests are not listed by hand where kilter's code can make them: the
reflectors of ``kilter.state.live.default_resources``, ``ApiBinder``,
``PodGroupEvents`` and the AdmissionCheck controller's server-side apply run
against a recording API server, each request is turned into the attributes
the API server authorizes (group, resource, verb, namespace, name) and
checked with RBAC's own matching rules; so are the plan-key Secret's
(``KeySecret``: created, read, rotated). Plan records and the Lease are
spelled out below. kube-scheduler shares the account; its own rights (the built-in ClusterRoles it is bound to,
and its Lease) are checked in test_scheduler_manifests.
"""

from __future__ import annotations

import http.client
import importlib
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast
from urllib.parse import parse_qs, urlsplit

import pytest

from kilter.extenders.binder import ApiBinder
from kilter.extenders.volcano.events import PodGroupEvents
from kilter.gangs import GangId, GangPlan, KeySecret, PlanRecorder, Slot, Victim
from kilter.gangs.key_secret import DEFAULT_ROTATION_S
from kilter.kube.api import ApiError, ApiServer
from kilter.state.live import default_resources
from kilter.state.reflector import Batch, Reflector, WatchedResource
from kilter.topology.catalog import BUILTIN, Catalog
from kilter.topology.plan import Plan
from kilter.webhooks.admissioncheck import CHECKS, CONTROLLER_NAME, WORKLOADS
from tests.config.yamldocs import COMPONENTS, CONFIG, Obj, component, one

README_FILE = CONFIG / "base" / "README.md"
RBAC_FILES = (CONFIG / "base" / "rbac.yaml", COMPONENTS / "scheduler-extender" / "rbac.yaml")

NAMESPACE = "kube-system"
ACCOUNT = "kilter-scheduler"
SUBJECT = {"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}
LEASE = "kilter-scheduler"  # kube-scheduler's Lease, which kilter follows (--follow-lease)
# kilter's own ClusterRoles: its live reads, its writes beside kube-scheduler, its AdmissionCheck's status.
KILTER_ROLES = ("kilter-read", "kilter-scheduler", "kilter-topology-admission-check")
# What kube-scheduler, sharing the account, is bound to (upstream's built-in roles and its Lease's).
SCHEDULER_ROLES = {
    ("ClusterRole", "system:kube-scheduler"),
    ("ClusterRole", "system:volume-scheduler"),
    ("Role", "extension-apiserver-authentication-reader"),
}
PLAN_KEYS = "kilter-plan-keys"  # the Secret of the plan keys, kube-system/kilter-plan-keys
COORDINATION = "coordination.k8s.io"
KUEUE = "kueue.x-k8s.io"
VOLCANO = "scheduling.volcano.sh"

READ = ("list", "watch")
VERBS = {"get", "list", "watch", "create", "update", "patch"}

# Plan records: the gang plan as annotations (a metadata patch of the main resource) on Workloads, Volcano
# PodGroups and pods, written by the leader.
PLAN_RECORDS = {(KUEUE, "workloads", "patch"), (VOLCANO, "podgroups", "patch"), ("", "pods", "patch")}

# The URLs the default ClusterRole system:discovery grants to every authenticated user.
DISCOVERY = re.compile(r"/api|/api/[^/]+|/apis|/apis/[^/]+|/apis/[^/]+/[^/]+|/version|/healthz|/livez|/readyz")


# ---------------------------------------------------------------------------- authorization


class Attributes(NamedTuple):
    """What the API server authorizes a resource request by (its RequestInfo)."""

    group: str
    resource: str  # with the subresource: pods/binding
    verb: str
    namespace: str
    name: str


def attributes(method: str, url: str) -> Attributes | None:
    """The request's attributes as the API server's RequestInfoFactory derives them; None for a non-resource URL."""
    split = urlsplit(url)
    parts = [p for p in split.path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return None
    if not rest:
        return None  # /api/v1, /apis/<group>/<version>: discovery
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource, name = rest[0], rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    if method == "GET":
        query = parse_qs(split.query)
        watching = query.get("watch", [""])[0] in ("1", "true")
        verb = "watch" if watching else ("get" if name else "list")
    else:
        verb = {
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if name else "deletecollection",
        }[method]
    return Attributes(group, resource, verb, namespace, name)


def _matches(rule: Obj, a: Attributes) -> bool:
    """RBAC's rule matching (pkg/apis/rbac/v1/evaluation_helpers.go), with "*" taken literally (none is allowed)."""
    names = rule.get("resourceNames") or []
    return (
        a.group in rule.get("apiGroups", [])
        and a.resource in rule.get("resources", [])
        and a.verb in rule["verbs"]
        and (not names or a.name in names)
    )


def allowed(docs: list[Obj], subject: Obj, a: Attributes) -> bool:
    """Whether the bindings in ``docs`` let ``subject`` make a request with these attributes."""
    for binding in docs:
        if binding.get("kind") not in ("ClusterRoleBinding", "RoleBinding") or subject not in binding["subjects"]:
            continue
        ref = binding["roleRef"]
        if binding["kind"] == "RoleBinding":
            if a.namespace != binding["metadata"]["namespace"]:
                continue
            role_namespace = binding["metadata"]["namespace"] if ref["kind"] == "Role" else None
        else:
            role_namespace = None
        for role in docs:
            if role.get("kind") != ref["kind"] or role["metadata"]["name"] != ref["name"]:
                continue
            if role_namespace is not None and role["metadata"].get("namespace") != role_namespace:
                continue
            if any(_matches(rule, a) for rule in role["rules"]):
                return True
    return False


# ---------------------------------------------------------------------------- kilter's own requests


class _Stream:
    """A watch that the server ends at once."""

    def readline(self) -> bytes:
        return b""

    def close(self) -> None:
        return None


@dataclass(frozen=True)
class RecordingApi(ApiServer):
    """Answers every request kilter makes as an empty cluster would, and remembers it."""

    served: tuple[str, ...] = ()
    requests: list[tuple[str, str]] = field(default_factory=list)

    def call(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        self.requests.append((method, path))
        if attributes(method, path) is None:
            return {"resources": [{"name": plural} for plural in self.served]}
        return {}

    def call_raw(self, method: str, path: str, *, accept: str = "application/json") -> tuple[bytes, str]:
        self.requests.append((method, path))
        return b'{"metadata": {"resourceVersion": "1"}, "items": []}', "application/json"

    def stream(self, path: str, *, timeout_s: float) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        self.requests.append(("GET", path))
        return cast(http.client.HTTPConnection, _Stream()), cast(http.client.HTTPResponse, _Stream())


@dataclass(frozen=True)
class SecretApi(RecordingApi):
    """Holds one Secret: absent (404) until created, then answered as last written."""

    held: list[Any] = field(default_factory=list)

    def call(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        self.requests.append((method, path))
        if method != "GET":
            self.held.append(body)
        elif not self.held:
            raise ApiError(404, "not found")
        return self.held[-1]


@dataclass(frozen=True)
class BoundApi(RecordingApi):
    """Answers a Binding 409 Conflict (the pod is bound already) and the pod itself on the node asked."""

    def call(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        self.requests.append((method, path))
        if path.endswith("/binding"):
            raise ApiError(409, "pod trainer-1 is already assigned to node gb200-r001-t01")
        return {"metadata": {"uid": "uid-5"}, "spec": {"nodeName": "gb200-r001-t01"}}


def _api(served: tuple[str, ...] = ()) -> RecordingApi:
    return RecordingApi("https", "apiserver.invalid", 443, served=served)


def _ignore(batch: Batch) -> None:
    return None


@pytest.fixture(scope="module")
def resources() -> list[WatchedResource]:
    return default_resources(Catalog(BUILTIN))


@pytest.fixture(scope="module")
def feed_requests(resources: list[WatchedResource]) -> list[tuple[str, str]]:
    """Discovery, list and watch of every resource of the live feed, as its reflectors make them."""
    api = _api(tuple(r.plural for r in resources))
    for resource in resources:
        reflector = Reflector(api, resource, _ignore)
        reflector.version = reflector._discover()
        assert reflector.version == resource.versions[0]
        reflector._list()
        reflector._watch()
    return api.requests


@pytest.fixture(scope="module")
def write_requests() -> list[tuple[str, str]]:
    """Every write kilter makes today: a Binding, an Event, the AdmissionCheck controller's applies, plan records,
    and an eviction (a repair taking a lent spare back)."""
    api = _api()
    ApiBinder(api).bind("team-a", "trainer-0", "uid-1", "gb200-r001-t00")
    ApiBinder(BoundApi("https", "apiserver.invalid", 443, requests=api.requests)).bind(
        "team-a", "trainer-1", "uid-5", "gb200-r001-t01"
    )  # a retried bind: 409, then the pod is read
    events = PodGroupEvents(api)
    try:
        written = events("team-a", "pretrain", "Unschedulable", "does not fit")
        assert written is not None
        written.result()
    finally:
        events.close()
    api.apply(WORKLOADS.format(namespace="team-a", name="job-pretrain"), {}, field_manager=CONTROLLER_NAME)
    api.apply(CHECKS.format(name="kilter-topology"), {}, field_manager=CONTROLLER_NAME)
    recorder = PlanRecorder(api)  # plan records: on the PodGroup, the Workload, or the gang's own pods
    try:
        for key, pods in (
            ("team-a/podgroup/pretrain", ()),
            ("team-a/workload/pretrain", ()),
            ("team-a/gang/g", ("g-0",)),
        ):
            gang = GangId(key, "test", 1)
            slots = [Slot("gb200-r001-t00", 0, 4)]
            uids = {"pretrain": "uid-2", "g-0": "uid-3"}  # records are signed for the UIDs the state shows
            victims = (Victim("team-a", "borrower", "uid-4", "gb200-r001-t00"),)  # a lent spare taken back: an eviction
            plan = GangPlan(gang, Plan(True, "", key), slots, 0.0, 0, pods=pods, uids=uids, victims=victims)
            written = recorder.on_planned(gang, plan)
            assert written is not None
            written.result()
    finally:
        recorder.close()
    return api.requests


@pytest.fixture(scope="module")
def secret_requests() -> list[tuple[str, str]]:
    """The plan-key Secret's requests: shipped empty (config/), filled at start, read, rotated once its key is due."""
    shipped = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": PLAN_KEYS}}
    api = SecretApi("https", "apiserver.invalid", 443, held=[shipped])
    now = [0.0]
    keys = KeySecret(api, NAMESPACE, PLAN_KEYS, clock=lambda: now[0])
    keys.load()
    now[0] = DEFAULT_ROTATION_S
    keys.refresh()
    assert keys.rotations == 1 and keys.failures == 0
    return api.requests


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def docs() -> list[Obj]:
    return [*component("base"), *component("scheduler-extender"), *component("kueue-admission-check")]


@pytest.fixture(scope="module")
def rbac_docs(docs: list[Obj]) -> list[Obj]:
    """The RBAC objects only."""
    return [
        d for d in docs if d["apiVersion"].startswith("rbac.authorization.k8s.io/") or d["kind"] == "ServiceAccount"
    ]


@pytest.fixture(scope="module")
def kilter_roles(docs: list[Obj]) -> list[Obj]:
    return [one(docs, "ClusterRole", name) for name in KILTER_ROLES]


def _grants(role: Obj) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule["verbs"]
    }


def _roles(docs: list[Obj]) -> list[Obj]:
    return [d for d in docs if d.get("kind") in ("ClusterRole", "Role")]


# ---------------------------------------------------------------------------- the ServiceAccount and bindings


def test_service_account_lives_in_kube_system(docs: list[Obj]) -> None:
    account = one(docs, "ServiceAccount", ACCOUNT)
    assert account["metadata"]["namespace"] == NAMESPACE


def test_namespaced_objects_live_in_kube_system(rbac_docs: list[Obj]) -> None:
    for doc in rbac_docs:
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            assert "namespace" not in doc["metadata"], f"{doc['kind']} is cluster-scoped"
        else:
            assert doc["metadata"]["namespace"] == NAMESPACE, f"{doc['kind']} {doc['metadata']['name']}"


def test_bindings_give_every_role_to_the_service_account_and_nothing_else(rbac_docs: list[Obj]) -> None:
    bindings = [d for d in rbac_docs if d.get("kind") in ("ClusterRoleBinding", "RoleBinding")]
    bound = set()
    for binding in bindings:
        assert binding["subjects"] == [SUBJECT], binding["metadata"]["name"]
        ref = binding["roleRef"]
        assert ref["apiGroup"] == "rbac.authorization.k8s.io"
        if binding["kind"] == "ClusterRoleBinding":
            assert ref["kind"] == "ClusterRole", "a ClusterRoleBinding cannot refer to a Role"
        bound.add((ref["kind"], ref["name"]))
        if (ref["kind"], ref["name"]) in SCHEDULER_ROLES:
            continue  # upstream's, present in every cluster
        role = one(rbac_docs, ref["kind"], ref["name"])
        if ref["kind"] == "Role":
            assert role["metadata"]["namespace"] == binding["metadata"]["namespace"]
    ours = {(r["kind"], r["metadata"]["name"]) for r in _roles(rbac_docs)}
    assert bound == ours | SCHEDULER_ROLES, "every role bound, once"
    assert len(bindings) == len(bound)


# ---------------------------------------------------------------------------- what kilter's ClusterRoles grant


def test_the_feed_may_list_and_watch_everything_it_reads(docs: list[Obj], resources: list[WatchedResource]) -> None:
    grants = _grants(one(docs, "ClusterRole", "kilter-read"))
    for r in resources:
        # RBAC rules carry no version: the one plural covers every version the feed may use (v1beta2, v1beta1).
        for verb in READ:
            assert (r.group, r.plural, verb) in grants, f"{verb} {r.name}"
        assert allowed(docs, SUBJECT, Attributes(r.group, r.plural, "list", "", ""))
        assert allowed(docs, SUBJECT, Attributes(r.group, r.plural, "watch", "", ""))


def test_every_request_of_the_feed_is_allowed_or_discovery(
    docs: list[Obj], feed_requests: list[tuple[str, str]]
) -> None:
    verbs = set()
    for method, url in feed_requests:
        a = attributes(method, url)
        if a is None:
            path = urlsplit(url).path
            assert method == "GET" and DISCOVERY.fullmatch(path), f"{method} {path} is not system:discovery's"
            continue
        verbs.add(a.verb)
        assert allowed(docs, SUBJECT, a), f"{method} {url} -> {a}"
    assert verbs == {"list", "watch"}, "the reflectors list and watch"


def test_every_write_is_allowed(docs: list[Obj], write_requests: list[tuple[str, str]]) -> None:
    seen = set()
    for method, url in write_requests:
        a = attributes(method, url)
        assert a is not None, url
        assert allowed(docs, SUBJECT, a), f"{method} {url} -> {a}"
        seen.add((a.group, a.resource, a.verb))
    assert seen == {
        ("", "pods/binding", "create"),  # ApiBinder
        ("", "pods", "get"),  # ApiBinder, after a 409: was the first answer of a retried bind lost?
        ("", "pods/eviction", "create"),  # PlanRecorder: a repair takes a lent spare back
        ("", "events", "create"),  # PodGroupEvents: core/v1, never events.k8s.io
        (KUEUE, "workloads/status", "patch"),  # the AdmissionCheck controller's server-side apply
        (KUEUE, "admissionchecks/status", "patch"),
        *PLAN_RECORDS,  # PlanRecorder's merge patches
    }


def test_plan_records_may_be_patched(docs: list[Obj]) -> None:
    for group, resource, verb in PLAN_RECORDS:
        assert allowed(docs, SUBJECT, Attributes(group, resource, verb, "team-a", "x")), resource


def test_kilters_cluster_roles_grant_exactly_what_kilter_uses(
    kilter_roles: list[Obj], feed_requests: list[tuple[str, str]], write_requests: list[tuple[str, str]]
) -> None:
    used = set(PLAN_RECORDS)
    for method, url in [*feed_requests, *write_requests]:
        a = attributes(method, url)
        if a is not None:
            used.add((a.group, a.resource, a.verb))
    assert set().union(*(_grants(role) for role in kilter_roles)) == used
    assert not any(rule.get("resourceNames") for role in kilter_roles for rule in role["rules"])


def test_nothing_beyond_what_kilter_needs(kilter_roles: list[Obj]) -> None:
    grants = set().union(*(_grants(role) for role in kilter_roles))
    assert ("events.k8s.io", "events", "create") not in grants, "kilter posts core/v1 Events only"
    assert not {g for g in grants if g[2] == "update"}, "server-side apply and annotations are PATCHes"
    assert {g for g in grants if g[2] == "get"} == {("", "pods", "get")}, "one pod read by name after a 409"
    assert not {g for g in grants if g[1] in ("secrets", "configmaps")}
    assert not {g for g in grants if g[1] in ("clusterqueues", "cohorts") and g[2] not in READ}


# ---------------------------------------------------------------------------- every role


def test_no_wildcard_anywhere(docs: list[Obj]) -> None:
    for role in _roles(docs):
        assert "aggregationRule" not in role
        for rule in role["rules"]:
            assert "nonResourceURLs" not in rule, "discovery is system:discovery's"
            for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert not any("*" in str(v) for v in rule.get(key, [])), f"{role['metadata']['name']}: {key}"


def test_no_verb_outside_the_allowed_set(docs: list[Obj]) -> None:
    for role in _roles(docs):
        for rule in role["rules"]:
            assert rule["verbs"] and set(rule["verbs"]) <= VERBS, f"{role['metadata']['name']}: {rule['verbs']}"


def test_no_create_rule_names_resources(docs: list[Obj]) -> None:
    # A create is a POST to the collection: RBAC has no name to match, so such a rule would never allow anything.
    for role in _roles(docs):
        for rule in role["rules"]:
            assert not (rule.get("resourceNames") and "create" in rule["verbs"]), role["metadata"]["name"]


# ---------------------------------------------------------------------------- the Lease kilter follows


def test_kilter_may_read_the_lease_it_follows_and_no_other(docs: list[Obj]) -> None:
    def may(verb: str, namespace: str = NAMESPACE, name: str = LEASE) -> bool:
        return allowed(docs, SUBJECT, Attributes(COORDINATION, "leases", verb, namespace, name))

    assert may("get")  # LeaseFollower; kube-scheduler, sharing the account, also updates it
    assert not may("get", name="kube-scheduler") and not may("update", name="kube-controller-manager")
    assert not may("patch") and not may("delete") and not may("list", name="") and not may("watch", name="")


# ---------------------------------------------------------------------------- the plan-key Secret


def may_keep_plan_keys_in(docs: list[Obj], subject: Obj, namespace: str, name: str = PLAN_KEYS) -> None:
    """Asserts that the Secret ``namespace/name`` is shipped and that ``subject`` may get and update it and do
    nothing else with Secrets: no create, which cannot be held to a name and would let it make a service-account
    token Secret under the name it may read (the other components' tests ask this of their accounts too)."""

    def may(verb: str, in_namespace: str = namespace, named: str = name) -> bool:
        return allowed(docs, subject, Attributes("", "secrets", verb, in_namespace, named))

    shipped = [
        d
        for d in docs
        if d["kind"] == "Secret" and (d["metadata"]["namespace"], d["metadata"]["name"]) == (namespace, name)
    ]
    assert len(shipped) == 1 and "data" not in shipped[0], "shipped empty, so that a re-apply keeps the keys"
    assert may("get") and may("update") and not may("create", named="")
    assert not may("get", named="kilter-webhooks-tls") and not may("update", named="other")
    for verb in ("list", "watch", "patch", "delete", "deletecollection"):
        assert not may(verb) and not may(verb, named=""), verb
    assert not may("create", in_namespace="default", named="") and not may("get", in_namespace="default")


def test_the_plan_key_secret_may_be_filled_read_and_rotated(
    docs: list[Obj], secret_requests: list[tuple[str, str]]
) -> None:
    seen = set()
    for method, url in secret_requests:
        a = attributes(method, url)
        assert a is not None, url
        assert allowed(docs, SUBJECT, a), f"{method} {url} -> {a}"
        seen.add((a.verb, a.name))
    assert seen == {("get", PLAN_KEYS), ("update", PLAN_KEYS)}, "never created: the Secret is shipped"


def test_the_plan_key_role_is_held_to_its_secret(docs: list[Obj]) -> None:
    role = one(docs, "Role", "kilter-scheduler-plan-keys")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert _grants(role) == {("", "secrets", "get"), ("", "secrets", "update")}
    named = [rule for rule in role["rules"] if rule.get("resourceNames")]
    assert [(sorted(r["verbs"]), r["resourceNames"]) for r in named] == [(["get", "update"], [PLAN_KEYS])]
    may_keep_plan_keys_in(docs, SUBJECT, NAMESPACE)


# ---------------------------------------------------------------------------- ServiceAccounts across config/


def _all_components() -> list[tuple[str, Obj]]:
    names = ["base", *sorted(p.name for p in COMPONENTS.iterdir() if (p / "kustomization.yaml").is_file())]
    return [(name, doc) for name in names for doc in component(name)]


def test_every_service_account_a_component_refers_to_exists() -> None:
    found = _all_components()
    accounts = {
        (d["metadata"].get("namespace"), d["metadata"]["name"]) for _, d in found if d["kind"] == "ServiceAccount"
    }
    assert (NAMESPACE, ACCOUNT) in accounts
    refs = []
    for name, doc in found:
        for subject in doc.get("subjects") or []:
            if subject["kind"] == "ServiceAccount":
                refs.append((name, (subject["namespace"], subject["name"])))
        template = (doc.get("spec") or {}).get("template") or {}
        pod_spec = (template.get("spec") or {}) if doc["kind"] != "Pod" else doc["spec"]
        if "serviceAccountName" in pod_spec:
            refs.append((name, (doc["metadata"]["namespace"], pod_spec["serviceAccountName"])))
    assert refs
    for name, ref in refs:
        assert ref in accounts, f"component {name} refers to ServiceAccount {ref[0]}/{ref[1]}, which none creates"


def test_the_volcano_kilters_writes_are_a_part_of_these(kilter_roles: list[Obj]) -> None:
    grants = set().union(*(_grants(role) for role in kilter_roles))
    others = [d for d in component("volcano") if d.get("kind") == "ClusterRole"]
    assert others
    for role in others:
        assert _grants(role) <= grants, role["metadata"]["name"]


# ---------------------------------------------------------------------------- README.md and comments


def _resolve(dotted: str) -> object:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def test_the_code_paths_named_exist() -> None:
    text = README_FILE.read_text(encoding="utf-8") + "".join(p.read_text(encoding="utf-8") for p in RBAC_FILES)
    named = set(re.findall(r"\bkilter(?:\.[A-Za-z_]\w*){2,}", text))
    assert "kilter.state.live.default_resources" in named
    for dotted in sorted(named):
        _resolve(dotted)  # raises when the module or the name is gone


def test_readme_names_every_granted_resource(docs: list[Obj]) -> None:
    text = README_FILE.read_text(encoding="utf-8")
    for role in _roles(docs):
        for _, resource, _ in _grants(role):
            assert f"`{resource}`" in text, resource

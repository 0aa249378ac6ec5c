"""config/components/webhooks, cert-manager and kueue-admission-check: webhook configurations, their Service and
certificate, and the AdmissionCheck, against kilter.

The port, the paths, the job kinds, the controller name, the annotation rules
and the command line come from kilter's own parser, readers, validator and
AdmissionCheck controller, so a change on either side that breaks the
installation fails here rather than in a cluster.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from pathlib import PurePosixPath

import celpy
import pytest
from celpy.adapter import json_to_cel

from kilter.cli.main import build_parser
from kilter.cli.serve import webhook_app
from kilter.cli.serve_config import DEFAULT_KILTER_USER, ServeConfig
from kilter.model import codec
from kilter.model.annotations import PLAN
from kilter.model.jobs import supported_kinds
from kilter.model.kueue import ClusterQueue
from kilter.quota.policy import DECAYED_USAGE, parse_policy
from kilter.state.cluster import from_objects
from kilter.state.store import ClusterStore
from kilter.webhooks import plan_guard
from kilter.webhooks.admissioncheck import CHECKS, CONTROLLER_NAME, WORKLOADS, our_checks
from kilter.webhooks.validate import QUEUE_KEYS, TOPOLOGY_POLICY, TOPOLOGY_VALUES
from tests.config.test_scheduler_manifests import go_duration_s
from tests.config.yamldocs import COMPONENTS, ROOT, Obj, component, container, documents, kilter_command, one, overlay
from tests.webhooks.conftest import admission_review

README_FILE = COMPONENTS / "webhooks" / "README.md"
EXAMPLE_QUEUE_FILE = ROOT / "examples" / "queues" / "admission-check.yaml"

KUEUE_MUTATING = "kueue-mutating-webhook-configuration"  # Kueue's, installed with name prefix kueue-
EXCLUDED_NAMESPACES = ("kube-system", "kueue-system")
NAMESPACE_LABEL = "kubernetes.io/metadata.name"
KUEUE = "kueue.x-k8s.io"
VOLCANO = "scheduling.volcano.sh"
# (API group, kind) of each object kilter reads plan records from -> the resource a webhook rule names.
PLAN_RESOURCES = {("", "Pod"): "pods", (KUEUE, "Workload"): "workloads", (VOLCANO, "PodGroup"): "podgroups"}
QUEUE_RESOURCES = {(KUEUE, "clusterqueues"), (KUEUE, "cohorts"), (KUEUE, "resourceflavors")}

# (API group, kind) of every kind kilter's job readers could support -> the resource a webhook rule names.
RESOURCES: dict[tuple[str, str], str] = {
    ("", "Pod"): "pods",
    ("batch", "Job"): "jobs",
    ("jobset.x-k8s.io", "JobSet"): "jobsets",
    ("kubeflow.org", "PyTorchJob"): "pytorchjobs",
    ("kubeflow.org", "MPIJob"): "mpijobs",
    ("ray.io", "RayJob"): "rayjobs",
    ("ray.io", "RayCluster"): "rayclusters",
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): "leaderworkersets",
    ("kueue.x-k8s.io", "Workload"): "workloads",
    ("batch.volcano.sh", "Job"): "jobs",
}
# Reader kinds the webhooks deliberately leave out, and why (the comments in webhooks.yaml say the same).
NOT_VALIDATED: dict[tuple[str, str], str] = {
    ("batch.volcano.sh", "Job"): (
        "Kueue does not manage Volcano Jobs: the Kueue TAS pod-set annotations kilter adds and checks would be "
        "read by nothing; their pods still pass the pods rule"
    ),
}
NOT_MUTATED: dict[tuple[str, str], str] = {
    **NOT_VALIDATED,
    ("kueue.x-k8s.io", "Workload"): (
        "Kueue takes a Workload's topology from spec.podSets[].topologyRequest, so annotations added to its "
        "pod-set templates would change nothing"
    ),
}


# ---------------------------------------------------------------------------- helpers


def _selects(selector: Obj, labels: dict[str, str]) -> bool:
    """Whether a metav1.LabelSelector matches ``labels`` (matchLabels AND every matchExpression)."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"unknown operator {op}")
    return True


def _reader_kinds() -> set[tuple[str, str]]:
    """(group, kind) of every kind kilter's readers support, from ``supported_kinds()`` ("group/Kind" or "Kind")."""
    out = set()
    for text in supported_kinds():
        group, _, kind = text.rpartition("/")
        out.add((group, kind))
    return out


def _covered(webhook: Obj) -> set[tuple[str, str]]:
    return {
        (group, resource) for rule in webhook["rules"] for group in rule["apiGroups"] for resource in rule["resources"]
    }


def _job_resources(excluded: dict[tuple[str, str], str]) -> set[tuple[str, str]]:
    return {(group, RESOURCES[(group, kind)]) for group, kind in _reader_kinds() if (group, kind) not in excluded}


def _review(obj: Obj, operation: str = "CREATE", old: Obj | None = None, user: str = "alice") -> Obj:
    """kilter's validating webhook's answer to an AdmissionReview for ``obj``, through its own decoder."""
    review = admission_review(obj, operation=operation, old=old, user=user)
    status, body = webhook_app(ClusterStore(), []).review(json.dumps(review).encode(), mutating=False)
    assert status == 200, body
    response: Obj = json.loads(body)["response"]
    return response


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def docs() -> list[Obj]:
    """The webhooks' own objects and cert-manager's, as their components' files hold them."""
    return [*component("webhooks"), *component("cert-manager")]


@pytest.fixture(scope="module")
def built() -> list[Obj]:
    """The webhooks overlay as kubectl kustomize builds it: the Deployment and configurations patched."""
    return overlay("webhooks")


@pytest.fixture(scope="module")
def mutating(docs: list[Obj]) -> Obj:
    return one(docs, "MutatingWebhookConfiguration")


@pytest.fixture(scope="module")
def validating(docs: list[Obj]) -> Obj:
    return one(docs, "ValidatingWebhookConfiguration")


@pytest.fixture(scope="module")
def webhooks(mutating: Obj, validating: Obj) -> list[tuple[str, Obj]]:
    """(configuration kind, webhook) for every webhook of both configurations."""
    return [(c["kind"], w) for c in (mutating, validating) for w in c["webhooks"]]


@pytest.fixture(scope="module")
def queue_webhook(validating: Obj) -> Obj:
    found: list[Obj] = [w for w in validating["webhooks"] if _covered(w) & QUEUE_RESOURCES]
    assert len(found) == 1, "one validating webhook for ClusterQueues and Cohorts"
    return found[0]


@pytest.fixture(scope="module")
def plan_webhook(validating: Obj) -> Obj:
    found: list[Obj] = [w for w in validating["webhooks"] if _covered(w) & {(VOLCANO, "podgroups")}]
    assert len(found) == 1, "one validating webhook for plan records (the only one that covers PodGroups)"
    return found[0]


@pytest.fixture(scope="module")
def job_webhook(validating: Obj, queue_webhook: Obj, plan_webhook: Obj) -> Obj:
    others: list[Obj] = [w for w in validating["webhooks"] if w is not queue_webhook and w is not plan_webhook]
    assert len(others) == 1, "one validating webhook for jobs"
    return others[0]


@pytest.fixture(scope="module")
def service(docs: list[Obj]) -> Obj:
    return one(docs, "Service", "kilter-webhooks")


@pytest.fixture(scope="module")
def certificate(docs: list[Obj]) -> Obj:
    cert = one(docs, "Certificate", "kilter-webhooks")
    assert cert["apiVersion"] == "cert-manager.io/v1"
    return cert


@pytest.fixture(scope="module")
def default_webhook_port() -> int:
    port: int = build_parser().parse_args(["serve", "--demo"]).webhook_port
    return port


@pytest.fixture(scope="module")
def deployment_docs(built: list[Obj]) -> list[Obj]:
    return built


@pytest.fixture(scope="module")
def pod_spec(deployment_docs: list[Obj]) -> Obj:
    spec: Obj = one(deployment_docs, "Deployment", "kilter-scheduler")["spec"]["template"]["spec"]
    return spec


@pytest.fixture(scope="module")
def kilter_args(pod_spec: Obj) -> argparse.Namespace:
    return kilter_command(pod_spec)


@pytest.fixture(scope="module")
def check_docs() -> list[Obj]:
    return component("kueue-admission-check")


@pytest.fixture(scope="module")
def example_queue() -> Obj:
    return one(documents(EXAMPLE_QUEUE_FILE), "ClusterQueue")


# ---------------------------------------------------------------------------- the configurations


def test_configurations_are_admissionregistration_v1(docs: list[Obj], mutating: Obj, validating: Obj) -> None:
    for config in (mutating, validating):
        assert config["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert "namespace" not in config["metadata"], "webhook configurations are cluster-scoped"
    assert len(mutating["webhooks"]) == 1
    assert len(validating["webhooks"]) == 3, "one for queues (Fail), one for jobs (Ignore), one for plans (Fail)"


def test_kilter_mutates_before_kueue(mutating: Obj) -> None:
    # Mutating configurations run sorted by name; Kueue's pod webhook reads the TAS annotations kilter adds.
    assert mutating["metadata"]["name"] < KUEUE_MUTATING


def test_webhook_names_are_unique_and_fully_qualified(webhooks: list[tuple[str, Obj]]) -> None:
    names = [w["name"] for _, w in webhooks]
    assert len(names) == len(set(names))
    for name in names:
        parts = name.split(".")
        assert len(parts) >= 3 and all(parts), f"{name}: a webhook name needs at least three segments"


def test_every_webhook_has_the_common_settings(webhooks: list[tuple[str, Obj]]) -> None:
    for _, webhook in webhooks:
        name = webhook["name"]
        assert webhook["sideEffects"] == "None", name
        assert webhook["admissionReviewVersions"] == ["v1"], name
        assert webhook["matchPolicy"] == "Equivalent", name
        timeout = webhook["timeoutSeconds"]
        assert isinstance(timeout, int) and not isinstance(timeout, bool) and 1 <= timeout <= 30, name
        assert webhook.get("failurePolicy") in ("Ignore", "Fail"), f"{name}: failurePolicy is an explicit choice"


def test_kilters_read_deadlines_outlast_every_webhooks_timeout(
    webhooks: list[tuple[str, Obj]], kilter_args: argparse.Namespace
) -> None:
    # A review the apiserver still waits for is never cut by kilter's own deadlines.
    config = ServeConfig.from_args(kilter_args)
    for _, webhook in webhooks:
        assert config.header_timeout_s + config.body_timeout_s >= webhook["timeoutSeconds"], webhook["name"]
        assert config.tls_handshake_timeout_s <= webhook["timeoutSeconds"], webhook["name"]


def test_every_webhook_skips_kube_system_and_kueue_system(webhooks: list[tuple[str, Obj]]) -> None:
    for _, webhook in webhooks:
        selector = webhook["namespaceSelector"]
        for namespace in EXCLUDED_NAMESPACES:
            assert not _selects(selector, {NAMESPACE_LABEL: namespace}), f"{webhook['name']} reaches {namespace}"
        assert _selects(selector, {NAMESPACE_LABEL: "team-a"}), f"{webhook['name']} must reach user namespaces"


def test_failure_policies(mutating: Obj, queue_webhook: Obj, job_webhook: Obj, plan_webhook: Obj) -> None:
    # Mutation is a convenience and job checks prefer availability; kilter's own queue state and its plan records
    # must be protected.
    assert [w["failurePolicy"] for w in mutating["webhooks"]] == ["Ignore"]
    assert job_webhook["failurePolicy"] == "Ignore"
    assert queue_webhook["failurePolicy"] == "Fail"
    assert plan_webhook["failurePolicy"] == "Fail"


def test_cert_manager_injects_the_ca_of_the_certificate(built: list[Obj], certificate: Obj) -> None:
    source = f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        config = one(built, kind)
        assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == source
        for webhook in config["webhooks"]:
            assert "caBundle" not in webhook["clientConfig"], "the CA injector fills caBundle"


def test_client_config_points_at_the_service(
    webhooks: list[tuple[str, Obj]], service: Obj, default_webhook_port: int
) -> None:
    paths = {"MutatingWebhookConfiguration": "/mutate", "ValidatingWebhookConfiguration": "/validate"}
    ports = {p["port"]: p for p in service["spec"]["ports"]}
    for kind, webhook in webhooks:
        ref = webhook["clientConfig"]["service"]
        assert "url" not in webhook["clientConfig"]
        assert (ref["namespace"], ref["name"]) == (service["metadata"]["namespace"], service["metadata"]["name"])
        assert ref["path"] == paths[kind]
        port = ports[ref.get("port", 443)]
        assert port["targetPort"] == default_webhook_port, "kilter serve's default --webhook-port"


def test_mutating_rules_cover_exactly_kilters_job_kinds(mutating: Obj) -> None:
    (webhook,) = mutating["webhooks"]
    assert set(RESOURCES) >= _reader_kinds(), "a new reader kind: add it to RESOURCES and decide on the rules"
    assert _covered(webhook) == _job_resources(NOT_MUTATED)
    for rule in webhook["rules"]:
        assert rule["operations"] == ["CREATE"], "kilter annotates jobs at submission only"
        assert rule["scope"] == "Namespaced"
        assert rule["apiVersions"] and "*" not in rule["apiVersions"]


def test_validating_rules_cover_exactly_kilters_job_kinds(job_webhook: Obj) -> None:
    assert set(RESOURCES) >= _reader_kinds()
    assert _covered(job_webhook) == _job_resources(NOT_VALIDATED)
    for rule in job_webhook["rules"]:
        assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]
        assert rule["scope"] == "Namespaced"
        assert all("/" not in r for r in rule["resources"]), "no subresources (workloads/status is Kueue's)"


def test_excluded_kinds_are_reader_kinds() -> None:
    # The exclusions stay honest: each names a kind kilter really reads.
    assert set(NOT_MUTATED) <= _reader_kinds()
    assert set(NOT_VALIDATED) <= set(NOT_MUTATED)


def test_queue_webhook_covers_clusterqueues_cohorts_and_resourceflavors(queue_webhook: Obj) -> None:
    assert _covered(queue_webhook) == QUEUE_RESOURCES
    for rule in queue_webhook["rules"]:
        assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]
        assert rule["scope"] == "Cluster"
        assert "v1beta2" in rule["apiVersions"], "Kueue's storage version since v0.16"
    # Every UPDATE must reach kilter, or kilter.dev/decayed-usage could be changed past it.
    assert not queue_webhook.get("matchConditions")


def test_job_webhook_match_conditions_keep_creates(job_webhook: Obj) -> None:
    conditions = job_webhook.get("matchConditions") or []
    assert len(conditions) <= 64
    assert len({c["name"] for c in conditions}) == len(conditions)
    for condition in conditions:
        # Written as "not an UPDATE, or ...": CREATEs are always reviewed.
        assert condition["expression"].strip().startswith("request.operation != 'UPDATE'")


def _condition(webhook: Obj, name: str) -> Callable[[str, Obj, Obj | None], bool]:
    """A webhook's matchCondition as the apiserver evaluates it (CEL over request, object and oldObject)."""
    (expression,) = [c["expression"] for c in webhook.get("matchConditions") or [] if c["name"] == name]
    env = celpy.Environment()
    program = env.program(env.compile(expression))

    def matches(operation: str, obj: Obj, old: Obj | None) -> bool:
        activation = {
            "request": json_to_cel({"operation": operation}),
            "object": json_to_cel(obj),
            "oldObject": json_to_cel(old),
        }
        return bool(program.evaluate(activation))

    return matches


def _pod(annotations: dict[str, str] | None, *, finalizers: list[str] | None = None) -> Obj:
    meta: Obj = {"name": "p", "namespace": "team-a"}
    if annotations is not None:
        meta["annotations"] = annotations
    if finalizers is not None:
        meta["finalizers"] = finalizers
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


def test_plan_webhook_covers_every_object_a_plan_record_is_read_from(plan_webhook: Obj) -> None:
    assert set(PLAN_RESOURCES) == set(plan_guard.GUARDED_KINDS)
    wanted = {(group, PLAN_RESOURCES[(group, kind)]) for group, kind in plan_guard.GUARDED_KINDS}
    assert _covered(plan_webhook) == wanted
    for rule in plan_webhook["rules"]:
        assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]
        assert rule["scope"] == "Namespaced"
        assert all("/" not in r for r in rule["resources"]), "records live in metadata, not in a subresource"
    assert plan_webhook["clientConfig"]["service"]["path"] == "/validate"


@pytest.mark.parametrize(
    ("operation", "new", "old", "reaches_kilter"),
    [
        pytest.param("CREATE", {PLAN: "r"}, None, True, id="a pod created with a record"),
        pytest.param("CREATE", {"team": "a"}, None, False, id="a pod created without one"),
        pytest.param("CREATE", None, None, False, id="a pod created without annotations"),
        pytest.param("UPDATE", {PLAN: "r"}, {PLAN: "r"}, False, id="a record kept as it was"),
        pytest.param("UPDATE", {PLAN: "r2"}, {PLAN: "r"}, True, id="a record changed"),
        pytest.param("UPDATE", {PLAN: "r"}, None, True, id="a record added"),
        pytest.param("UPDATE", {PLAN: ""}, {}, True, id="an empty record added"),
        pytest.param("UPDATE", {}, {PLAN: "r"}, True, id="a record removed"),
        pytest.param("UPDATE", None, {PLAN: "r"}, True, id="a record removed with every annotation"),
    ],
)
def test_plan_webhook_hears_of_every_write_of_a_record_and_of_nothing_else(
    plan_webhook: Obj, operation: str, new: dict[str, str] | None, old: dict[str, str] | None, reaches_kilter: bool
) -> None:
    matches = _condition(plan_webhook, "writes-a-plan-record")
    old_obj = _pod(old) if operation == "UPDATE" else None
    assert matches(operation, _pod(new), old_obj) is reaches_kilter


def test_a_finalizer_removed_from_a_pod_carrying_a_record_never_waits_on_kilter(plan_webhook: Obj) -> None:
    # failurePolicy Fail: while kilter is down, only what reaches it is refused. Kueue removes its finalizer from
    # every pod of an admitted gang; that must not depend on kilter being up.
    matches = _condition(plan_webhook, "writes-a-plan-record")
    held = {PLAN: "r", "team": "a"}
    assert not matches("UPDATE", _pod(held, finalizers=[]), _pod(held, finalizers=["kueue.x-k8s.io/managed"]))


def test_kilter_refuses_a_tenants_record_on_each_kind_the_plan_webhook_sends(plan_webhook: Obj) -> None:
    for (group, kind), _ in sorted(PLAN_RESOURCES.items()):
        api_version = f"{group}/v1beta2" if group == KUEUE else f"{group}/v1beta1" if group else "v1"
        record = '{"v":2,"gang":"team-a/gang/x","at":"2025-06-01T12:00:00Z"}'
        meta: Obj = {"name": "x", "namespace": "team-a", "annotations": {PLAN: record}}
        obj: Obj = {"apiVersion": api_version, "kind": kind, "metadata": meta}
        response = _review(obj)
        assert response["allowed"] is False, kind
        assert PLAN in response["status"]["message"], kind


def test_job_webhook_match_condition_sends_creates_and_metadata_changes_only(job_webhook: Obj) -> None:
    matches = _condition(job_webhook, "create-or-metadata-change")
    plain = _pod({"team": "a"})
    assert matches("CREATE", plain, None)
    assert not matches("UPDATE", _pod({"team": "a"}, finalizers=[]), _pod({"team": "a"}, finalizers=["f"]))
    assert matches("UPDATE", _pod({"team": "b"}), plain)
    assert matches("UPDATE", _pod(None), plain)


# ---------------------------------------------------------------------------- Service, certificate, deployment


def test_service_selects_the_kilter_pod(service: Obj, deployment_docs: list[Obj], default_webhook_port: int) -> None:
    deployment = one(deployment_docs, "Deployment", "kilter-scheduler")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert [p["targetPort"] for p in service["spec"]["ports"]] == [default_webhook_port]


def test_service_does_not_expose_the_extender(service: Obj, kilter_args: argparse.Namespace) -> None:
    for port in service["spec"]["ports"]:
        assert kilter_args.http_port not in (port["port"], port["targetPort"])


def test_certificate_names_the_service(certificate: Obj, service: Obj, webhooks: list[tuple[str, Obj]]) -> None:
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    assert certificate["metadata"]["namespace"] == namespace
    assert set(certificate["spec"]["dnsNames"]) == {f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"}
    # The apiserver dials <service>.<namespace>.svc and checks the certificate against that name.
    for _, webhook in webhooks:
        ref = webhook["clientConfig"]["service"]
        assert f"{ref['name']}.{ref['namespace']}.svc" in certificate["spec"]["dnsNames"]


def test_certificate_is_issued_by_the_self_signed_issuer(docs: list[Obj], certificate: Obj) -> None:
    ref = certificate["spec"]["issuerRef"]
    assert ref.get("kind", "Issuer") == "Issuer" and ref.get("group", "cert-manager.io") == "cert-manager.io"
    issuer = one(docs, "Issuer", ref["name"])
    assert issuer["apiVersion"] == "cert-manager.io/v1"
    assert issuer["metadata"]["namespace"] == certificate["metadata"]["namespace"]
    assert "selfSigned" in issuer["spec"]


def test_certificate_renews_well_before_it_expires(certificate: Obj) -> None:
    duration = go_duration_s(certificate["spec"]["duration"])
    renew_before = go_duration_s(certificate["spec"]["renewBefore"])
    assert 0 < renew_before < duration
    assert renew_before >= 7 * 86400, "a week at least to notice a renewal that fails"


def test_kilter_serves_the_webhooks_with_the_certificates_secret(
    kilter_args: argparse.Namespace, pod_spec: Obj, certificate: Obj, service: Obj
) -> None:
    assert kilter_args.command == "serve"
    assert kilter_args.webhook_port == service["spec"]["ports"][0]["targetPort"]
    assert kilter_args.tls_cert_file is not None and kilter_args.tls_key_file is not None
    cert, key = PurePosixPath(str(kilter_args.tls_cert_file)), PurePosixPath(str(kilter_args.tls_key_file))
    assert (cert.name, key.name) == ("tls.crt", "tls.key"), "the keys cert-manager writes"
    kilter = container(pod_spec, "kilter")
    mounts = [m for m in kilter["volumeMounts"] if PurePosixPath(m["mountPath"]) == cert.parent]
    assert len(mounts) == 1, f"one volume mounted at {cert.parent}"
    (mount,) = mounts
    assert key.parent == cert.parent
    assert "subPath" not in mount and "subPathExpr" not in mount, "subPath mounts never see a rotated Secret"
    assert mount.get("readOnly") is True
    volume = next(v for v in pod_spec["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == certificate["spec"]["secretName"]
    assert "items" not in volume["secret"], "items would rename the keys"
    ports = {p["containerPort"]: p.get("name") for p in kilter["ports"]}
    assert ports.get(kilter_args.webhook_port) == "webhooks"


def test_the_extender_stays_plain_http(kilter_args: argparse.Namespace) -> None:
    assert not kilter_args.http_tls


def test_network_policy_lets_the_apiserver_reach_the_webhooks(
    deployment_docs: list[Obj], kilter_args: argparse.Namespace
) -> None:
    for policy in (d for d in deployment_docs if d.get("kind") == "NetworkPolicy"):
        if "Ingress" not in policy["spec"].get("policyTypes", ["Ingress"]):
            continue
        opened = {
            port["port"]
            for rule in policy["spec"].get("ingress") or []
            if not rule.get("from")  # the apiserver's address is not a pod selector
            for port in rule.get("ports") or []
        }
        assert kilter_args.webhook_port in opened


def test_kilters_service_account_may_write_its_own_annotations(
    kilter_args: argparse.Namespace, deployment_docs: list[Obj], pod_spec: Obj
) -> None:
    # The queue webhook lets only kilter's users change kilter.dev/decayed-usage: that must be this pod.
    namespace = one(deployment_docs, "Deployment", "kilter-scheduler")["metadata"]["namespace"]
    user = f"system:serviceaccount:{namespace}:{pod_spec['serviceAccountName']}"
    assert user in (kilter_args.kilter_user or [DEFAULT_KILTER_USER])


# ---------------------------------------------------------------------------- admissioncheck.yaml


def test_admission_check_is_kilters(check_docs: list[Obj]) -> None:
    check = one(check_docs, "AdmissionCheck")
    assert check["apiVersion"] == f"{KUEUE}/v1beta2"
    assert check["spec"]["controllerName"] == CONTROLLER_NAME
    assert "retryDelayMinutes" not in check["spec"], "removed in v1beta2"
    # kilter's controller finds it the way it will in the cluster.
    assert our_checks(from_objects(check_docs)) == [check["metadata"]["name"]]


def test_the_controller_may_write_the_status_it_writes(check_docs: list[Obj], pod_spec: Obj) -> None:
    # kilter serve --in-cluster applies (PATCH) status at these paths with the pod's ServiceAccount.
    needed = set()
    for path in (WORKLOADS, CHECKS):
        parts = path.strip("/").split("/")  # apis, group, version, [namespaces, ns], resource, name, status
        assert parts[0] == "apis" and parts[-1] == "status"
        needed.add((parts[1], f"{parts[-3]}/status"))
    subject = {"kind": "ServiceAccount", "name": pod_spec["serviceAccountName"], "namespace": "kube-system"}
    roles = {
        b["roleRef"]["name"]
        for b in check_docs
        if b.get("kind") == "ClusterRoleBinding" and subject in b["subjects"] and b["roleRef"]["kind"] == "ClusterRole"
    }
    granted = {
        (group, resource)
        for role in check_docs
        if role.get("kind") == "ClusterRole" and role["metadata"]["name"] in roles
        for rule in role["rules"]
        if "patch" in rule["verbs"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert needed <= granted


def test_example_queue_uses_the_check_the_v1beta2_way(check_docs: list[Obj], example_queue: Obj) -> None:
    check = one(check_docs, "AdmissionCheck")
    assert example_queue["apiVersion"] == f"{KUEUE}/v1beta2"
    spec = example_queue["spec"]
    assert "admissionChecks" not in spec, "v1beta2 has no spec.admissionChecks"
    rules = spec["admissionChecksStrategy"]["admissionChecks"]
    assert 1 <= len(rules) <= 64
    assert check["metadata"]["name"] in [r["name"] for r in rules]


def test_example_queue_has_gb200_gpu_quota(example_queue: Obj) -> None:
    cq = codec.convert(example_queue, ClusterQueue)
    gpus = {
        flavor.name: quota.nominal_quota
        for group in cq.spec.resource_groups
        for flavor in group.flavors
        for quota in flavor.resources
        if quota.name == "nvidia.com/gpu"
    }
    assert "gb200" in gpus and int(str(gpus["gb200"])) > 0
    # Kueue: each flavor lists exactly the group's coveredResources, in the same order.
    for group in cq.spec.resource_groups:
        for flavor in group.flavors:
            assert [q.name for q in flavor.resources] == group.covered_resources, flavor.name


def test_example_queue_annotations_pass_kilters_rules(example_queue: Obj) -> None:
    notes: dict[str, str] = example_queue["metadata"]["annotations"]
    name = example_queue["metadata"]["name"]
    parse_policy(notes, path=f"ClusterQueue {name}")
    assert {k for k in notes if k.startswith("kilter.dev/")} <= set(QUEUE_KEYS)
    assert notes[TOPOLOGY_POLICY] in TOPOLOGY_VALUES
    assert DECAYED_USAGE not in notes, "written by kilter only"


def test_kilters_validating_webhook_admits_the_example_queue(example_queue: Obj) -> None:
    assert _review(example_queue)["allowed"] is True
    # ... and would refuse it with a policy kilter does not know: the review above really checks.
    bad = {**example_queue, "metadata": {**example_queue["metadata"], "annotations": {TOPOLOGY_POLICY: "always"}}}
    assert _review(bad)["allowed"] is False


# ---------------------------------------------------------------------------- README.md


def _choices() -> dict[str, tuple[str, int]]:
    """The README's table of webhooks: name -> (failurePolicy, timeoutSeconds)."""
    text = README_FILE.read_text(encoding="utf-8")
    rows: dict[str, tuple[str, int]] = {}
    for line in text.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and re.fullmatch(r"[a-z0-9-]+(\.[a-z0-9-]+){2,}", cells[0]) and cells[2].isdigit():
            rows[cells[0]] = (cells[1], int(cells[2]))
    return rows


def test_readme_table_matches_the_webhooks(webhooks: list[tuple[str, Obj]]) -> None:
    rows = _choices()
    assert rows == {w["name"]: (w["failurePolicy"], w["timeoutSeconds"]) for _, w in webhooks}

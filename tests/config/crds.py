"""Strict models of the custom resources kilter's overlays create, for checking the built objects.

kubernetes-validate knows only Kubernetes' own kinds. Kueue's AdmissionCheck and cert-manager's Issuer and
Certificate are decoded here with unknown fields refused, spelled as their Go types' JSON tags spell them
(kueue apis/kueue/v1beta2 admissioncheck_types.go; cert-manager pkg/apis/certmanager/v1 types_certificate.go,
types_issuer.go), so a misspelled or misplaced field fails a test rather than being dropped by the apiserver's
pruning of unknown fields.
"""

from __future__ import annotations

from typing import Any

import msgspec

Obj = dict[str, Any]


class _Strict(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    pass


class ObjectMeta(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    namespace: str | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


# ---------------------------------------------------------------------------- Kueue


class AdmissionCheckParametersReference(_Strict):
    api_group: str
    kind: str
    name: str


class AdmissionCheckSpec(_Strict):
    controller_name: str
    parameters: AdmissionCheckParametersReference | None = None


class AdmissionCheck(_Strict):
    api_version: str
    kind: str
    metadata: ObjectMeta
    spec: AdmissionCheckSpec


# ---------------------------------------------------------------------------- cert-manager


class IssuerReference(_Strict):
    name: str
    kind: str | None = None
    group: str | None = None


class CertificatePrivateKey(_Strict):
    rotation_policy: str | None = None
    encoding: str | None = None
    algorithm: str | None = None
    size: int | None = None


class CertificateSpec(_Strict):
    secret_name: str
    issuer_ref: IssuerReference
    common_name: str | None = None
    dns_names: list[str] = []
    ip_addresses: list[str] = []
    duration: str | None = None
    renew_before: str | None = None
    usages: list[str] = []
    is_ca: bool | None = msgspec.field(default=None, name="isCA")
    private_key: CertificatePrivateKey | None = None
    revision_history_limit: int | None = None


class Certificate(_Strict):
    api_version: str
    kind: str
    metadata: ObjectMeta
    spec: CertificateSpec


class SelfSignedIssuer(_Strict):
    crl_distribution_points: list[str] = []


class CAIssuer(_Strict):
    secret_name: str


class IssuerSpec(_Strict):
    self_signed: SelfSignedIssuer | None = None
    ca: CAIssuer | None = None


class Issuer(_Strict):
    api_version: str
    kind: str
    metadata: ObjectMeta
    spec: IssuerSpec


# ---------------------------------------------------------------------------- prometheus-operator


class LabelSelector(_Strict):
    match_labels: dict[str, str] = {}
    match_expressions: list[dict[str, Any]] = []


class NamespaceSelector(_Strict):
    any: bool | None = None
    match_names: list[str] = []


class Endpoint(_Strict):
    port: str | None = None
    target_port: int | str | None = None
    path: str | None = None
    scheme: str | None = None
    interval: str | None = None
    scrape_timeout: str | None = None
    honor_labels: bool | None = None
    metric_relabelings: list[dict[str, Any]] = []
    relabelings: list[dict[str, Any]] = []


class ServiceMonitorSpec(_Strict):
    selector: LabelSelector
    endpoints: list[Endpoint]
    namespace_selector: NamespaceSelector | None = None
    job_label: str | None = None
    target_labels: list[str] = []
    sample_limit: int | None = None


class ServiceMonitor(_Strict):
    api_version: str
    kind: str
    metadata: ObjectMeta
    spec: ServiceMonitorSpec


class Rule(msgspec.Struct, forbid_unknown_fields=True):
    expr: str
    alert: str | None = None
    record: str | None = None
    for_: str | None = msgspec.field(default=None, name="for")
    keep_firing_for: str | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class RuleGroup(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    rules: list[Rule]
    interval: str | None = None
    query_offset: str | None = None
    limit: int | None = None
    labels: dict[str, str] = {}
    partial_response_strategy: str | None = None


class PrometheusRuleSpec(_Strict):
    groups: list[RuleGroup]


class PrometheusRule(_Strict):
    api_version: str
    kind: str
    metadata: ObjectMeta
    spec: PrometheusRuleSpec


MODELS: dict[tuple[str, str], type[msgspec.Struct]] = {
    ("kueue.x-k8s.io/v1beta2", "AdmissionCheck"): AdmissionCheck,
    ("cert-manager.io/v1", "Certificate"): Certificate,
    ("cert-manager.io/v1", "Issuer"): Issuer,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): ServiceMonitor,
    ("monitoring.coreos.com/v1", "PrometheusRule"): PrometheusRule,
}


def check(obj: Obj) -> msgspec.Struct:
    """The object decoded by its strict model; raises msgspec.ValidationError (with the field's path) if it is off."""
    model = MODELS[(obj["apiVersion"], obj["kind"])]
    return msgspec.convert(obj, model)

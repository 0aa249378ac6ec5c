"""``kilter certs``' one round: the webhooks' Secret issued or renewed, and its CA in every ``caBundle``.

Run by the leader of the ``kilter-certs`` replicas (``kilter.kube.leader``),
every ``interval`` (a minute): a certificate renewed 30 days ahead is
renewed on the first round of that day, whoever leads then.

* The Secret (``kubernetes.io/tls``) is read with GET. Absent, it is POSTed
  with new certificates; a 409 AlreadyExists means another replica made it
  first, and its certificates are the ones read next round. Present and due
  (``certs.due``), it is replaced with a PUT carrying the resourceVersion
  read: a 409 Conflict means someone changed it since, and the next round
  judges that version. A Secret whose values are not base64 is renewed.
* The CAs the configurations trust now (their ``caBundle``) and have not
  expired stay in the new bundle whenever a new CA is made: the pair kilter's
  pod still serves until the kubelet swaps the files in keeps being trusted,
  whatever made it (a lost ``ca.key``, cert-manager before this overlay).
* Each webhook configuration is read with GET; a webhook whose
  ``clientConfig.caBundle`` is not the Secret's ``ca.crt`` gets it in a JSON
  merge patch of the whole ``webhooks`` list as read, with the
  resourceVersion read as a precondition, so an edit made meanwhile (a 409)
  is never overwritten. A configuration that does not exist yet is skipped
  and counted: it may be applied after kilter.

Nothing here decides about certificates: that is ``certs``.
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime as dt
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kilter.kube.api import MERGE_PATCH, ApiError, ApiServer, object_path
from kilter.webhooks import certs

__all__ = ["WEBHOOK_APIS", "CertController", "Round"]

log = logging.getLogger("kilter.webhooks")

WEBHOOK_APIS = {
    "mutating": ("/apis/admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations"),
    "validating": ("/apis/admissionregistration.k8s.io/v1", "validatingwebhookconfigurations"),
}


@dataclass
class Round:
    """What one round did: why it issued (empty: nothing was due), which configurations it patched, and what it
    could not do."""

    issued: str = ""
    patched: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _decode(data: Any) -> dict[str, bytes] | None:
    if not isinstance(data, dict):
        return None
    try:
        return {k: base64.b64decode(v, validate=True) for k, v in data.items() if isinstance(v, str)}
    except (binascii.Error, ValueError):
        return None


def _encode(issued: certs.Issued) -> dict[str, str]:
    return {k: base64.b64encode(v).decode() for k, v in issued.data().items()}


class CertController:
    """Keeps ``secret`` (namespace, name) holding certificates for ``service`` and ``configurations``
    (``kind/name``, kind ``mutating`` or ``validating``) trusting their CA."""

    def __init__(
        self,
        api: ApiServer,
        secret: tuple[str, str],
        service: tuple[str, str],
        configurations: Sequence[str],
        *,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.api = api
        self.namespace, self.name = secret
        self.names = certs.service_names(*service)
        self.configurations = list(configurations)
        self.clock = clock
        self.collection = object_path("/api/v1", "secrets", namespace=self.namespace)
        self.path = object_path("/api/v1", "secrets", self.name, namespace=self.namespace)
        self.expiry: dt.datetime | None = None  # the serving certificate's, as last read or written
        self.rounds = 0
        self.failures = 0

    def run_once(self) -> Round:
        """One round; API errors are reported in the round (and counted), never raised."""
        done = Round()
        self.rounds += 1
        configs: dict[str, Any] = {}
        for ref in self.configurations:
            try:
                configs[ref] = self._read(ref)
            except ApiError as exc:
                if exc.code == 404:
                    done.missing.append(ref)
                else:
                    self.failures += 1
                    done.errors.append(f"{ref}: {exc}")
        trusted = b"".join(
            base64.b64decode(w.get("clientConfig", {}).get("caBundle") or "")
            for config in configs.values()
            for w in config.get("webhooks") or []
        )
        try:
            bundle = self._keep_secret(done, trusted)
        except ApiError as exc:
            self.failures += 1
            done.errors.append(f"Secret {self.namespace}/{self.name}: {exc}")
            return done
        if bundle is None:
            return done
        for ref, config in configs.items():
            try:
                self._keep_bundle(ref, config, bundle, done)
            except ApiError as exc:
                self.failures += 1
                done.errors.append(f"{ref}: {exc}")
        return done

    def _read(self, ref: str) -> Any:
        kind, _, name = ref.partition("/")
        base, plural = WEBHOOK_APIS[kind]
        return self.api.call("GET", object_path(base, plural, name))

    def _keep_secret(self, done: Round, also_trust: bytes) -> bytes | None:
        """The CA bundle of the Secret as it stands after this round; None when the round lost a race."""
        now = self.clock()
        try:
            secret = self.api.call("GET", self.path)
        except ApiError as exc:
            if exc.code != 404:
                raise
            secret = None
        stored = _decode(secret.get("data")) if isinstance(secret, dict) else None
        previous = certs.Issued.of(stored) if stored is not None else None
        why = certs.due(previous, self.names, now)
        if not why:
            assert previous is not None
            self.expiry = certs.expiry(previous.tls_crt)
            return previous.ca_crt
        issued = certs.issue(previous, self.names, now, also_trust=also_trust)
        try:
            if secret is None:  # not shipped (config/ ships it): made here, as cert-manager makes its own
                body: dict[str, Any] = {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "type": "kubernetes.io/tls",
                    "data": _encode(issued),
                }
                self.api.call("POST", self.collection, body)
            else:  # the Secret as read, its data replaced: labels, annotations, owners and its type are kept
                body = copy.deepcopy(secret)
                body["data"] = _encode(issued)
                self.api.call("PUT", self.path, body)
        except ApiError as exc:
            if exc.code == 409:  # another replica or a person wrote it first: judged again next round
                log.info("Secret %s/%s changed meanwhile; judged again next round", self.namespace, self.name)
                return None
            raise
        done.issued = why
        self.expiry = certs.expiry(issued.tls_crt)
        log.info("Secret %s/%s: new certificates (%s)", self.namespace, self.name, why)
        return issued.ca_crt

    def _keep_bundle(self, ref: str, config: Any, bundle: bytes, done: Round) -> None:
        kind, _, name = ref.partition("/")
        base, plural = WEBHOOK_APIS[kind]
        path = object_path(base, plural, name)
        wanted = base64.b64encode(bundle).decode()
        webhooks = config.get("webhooks") or []
        if all((w.get("clientConfig") or {}).get("caBundle") == wanted for w in webhooks):
            return
        for w in webhooks:
            w.setdefault("clientConfig", {})["caBundle"] = wanted
        patch = {"metadata": {"resourceVersion": config["metadata"]["resourceVersion"]}, "webhooks": webhooks}
        try:
            self.api.call("PATCH", path, patch, content_type=MERGE_PATCH)
        except ApiError as exc:
            if exc.code == 409:
                log.info("%s changed meanwhile; its caBundle is set next round", ref)
                return
            raise
        done.patched.append(ref)
        log.info("%s: caBundle set to the CA of Secret %s/%s", ref, self.namespace, self.name)

"""Pods by label and annotation value: how the gang book finds a gang's pods among 100,000 without reading them all.

The store tells the index of every pod it adds or drops; the index keeps, per
(namespace, label-or-annotation, key, value), the pods that carry it, for the
keys it was asked to index only (the gang labels and the Workload annotation:
a handful of keys, so the index grows with the pods, not with what tenants
write on them). It is built on first use, so a store nobody asks costs nothing.

Pods are also found by the ResourceClaimTemplates their ``spec.resourceClaims``
name (how a pod joins an NVIDIA ComputeDomain), built on first use apart from
the label index: most pods name none, so it costs what DRA pods there are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kilter.model.core_v1 import Pod

__all__ = ["PodIndex"]

Entry = tuple[str, bool, str, str]  # (namespace, is a label, key, value)


class PodIndex:
    """The pods of a store by indexed label and annotation values; the store calls ``add`` and ``drop``."""

    def __init__(self, pods: Mapping[str, Pod]) -> None:
        self._pods = pods  # the store's pods by uid: what a first use indexes, and what an unindexed ask reads
        self._keys: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())  # labels, annotations
        self._index: dict[Entry, dict[str, Pod]] | None = None  # built on first use
        self._claims: dict[tuple[str, str], dict[str, Pod]] | None = None  # (namespace, template) -> pods by uid

    def index(self, labels: Iterable[str], annotations: Iterable[str]) -> None:
        """Index these label and annotation keys too from now on. Keys already indexed stay, and asking for them
        again keeps the index: readers that each ask for their own keys (the gang book, ``kubectl kilter
        explain`` served by kilter) do not rebuild it from every pod in turn. New keys build it again on first use.
        """
        keys = (self._keys[0] | frozenset(labels), self._keys[1] | frozenset(annotations))
        if keys != self._keys:
            self._keys = keys
            self._index = None

    def add(self, uid: str, pod: Pod) -> None:
        if self._index is not None:
            for entry in self._entries(pod):
                self._index.setdefault(entry, {})[uid] = pod
        if self._claims is not None:
            for claim in _templates(pod):
                self._claims.setdefault(claim, {})[uid] = pod

    def drop(self, uid: str, pod: Pod) -> None:
        if self._index is not None:
            for entry in self._entries(pod):
                self._index.get(entry, {}).pop(uid, None)
        if self._claims is not None:
            for claim in _templates(pod):
                held = self._claims.get(claim)
                if held is not None:
                    held.pop(uid, None)
                    if not held:
                        del self._claims[claim]

    def pods_claiming(self, namespace: str, template: str) -> list[Pod]:
        """The pods of ``namespace`` whose ``spec.resourceClaims`` name ResourceClaimTemplate ``template``."""
        if self._claims is None:
            self._claims = {}
            for uid, pod in self._pods.items():
                for claim in _templates(pod):
                    self._claims.setdefault(claim, {})[uid] = pod
        return list(self._claims.get((namespace, template), {}).values())

    def pods_with(self, namespace: str, labels: Mapping[str, str], annotations: Mapping[str, str]) -> list[Pod]:
        """The pods of ``namespace`` that carry every one of these labels and annotations.

        Through the index when a key is indexed, else by reading every pod.
        """
        wanted = [(namespace, True, k, v) for k, v in labels.items() if k in self._keys[0]]
        wanted += [(namespace, False, k, v) for k, v in annotations.items() if k in self._keys[1]]
        candidates: Iterable[Pod]
        if wanted:
            index = self._built()
            entry = min(wanted, key=lambda e: len(index.get(e, {})))
            candidates = index.get(entry, {}).values()
            # the entry holds only pods of its namespace carrying its key and value: check the rest alone
            labels = {k: v for k, v in labels.items() if entry != (namespace, True, k, v)}
            annotations = {k: v for k, v in annotations.items() if entry != (namespace, False, k, v)}
        else:
            candidates = (p for p in self._pods.values() if p.metadata.namespace == namespace)
        if not labels and not annotations:
            return list(candidates)
        return [
            p
            for p in candidates
            if all(p.metadata.labels.get(k) == v for k, v in labels.items())
            and all(p.metadata.annotations.get(k) == v for k, v in annotations.items())
        ]

    def _built(self) -> dict[Entry, dict[str, Pod]]:
        """The index, built from every pod on first use."""
        if self._index is None:
            self._index = {}
            for uid, pod in self._pods.items():
                self.add(uid, pod)
        return self._index

    def _entries(self, pod: Pod) -> list[Entry]:
        meta = pod.metadata
        label_keys, note_keys = self._keys
        out = [(meta.namespace, True, k, v) for k, v in meta.labels.items() if k in label_keys]
        out += [(meta.namespace, False, k, v) for k, v in meta.annotations.items() if k in note_keys]
        return out


def _templates(pod: Pod) -> set[tuple[str, str]]:
    """(namespace, template) for each ResourceClaimTemplate the pod's claims are made from."""
    ns = pod.metadata.namespace
    return {(ns, c.resource_claim_template_name) for c in pod.spec.resource_claims if c.resource_claim_template_name}

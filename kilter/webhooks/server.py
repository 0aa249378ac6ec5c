"""The HTTPS listener of the admission webhooks: ``POST /mutate``, ``POST /validate``, ``/healthz``, ``/readyz``.

A bare ASGI app like the extender's. A body kube-apiserver could not have
sent — not JSON (or JSON nested past the decoder's recursion limit), not
``admission.k8s.io/v1``, no request uid — gets a 400 (there is no uid to
answer under); everything else gets an AdmissionReview,
and a failure inside a rule becomes a denial that says so, never a 5xx.
"""

from __future__ import annotations

import logging

import msgspec

from kilter.model import codec
from kilter.model.asgi import BodyRefused, Receive, Scope, Send, read_body, reply
from kilter.state.store import ClusterStore
from kilter.webhooks.admission import ADMISSION_V1, AdmissionReview, Verdict, answer
from kilter.webhooks.mutate import Mutator
from kilter.webhooks.validate import Validator

__all__ = ["MAX_REVIEW_BYTES", "WebhookApp"]

log = logging.getLogger("kilter.webhooks")

# An object is at most ~1.5 MiB in etcd; a review carries it and its old version.
MAX_REVIEW_BYTES = 16 * 1024 * 1024


class WebhookApp:
    def __init__(self, store: ClusterStore, mutator: Mutator, validator: Validator) -> None:
        self.store = store
        self.mutator = mutator
        self.validator = validator
        self.decoder = codec.JsonDecoder(AdmissionReview)  # nested too deep: a DecodeError, hence a 400

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path in ("/mutate", "/validate"):
            if method != "POST":
                await reply(send, 405, body=b"POST only\n")
                return
            chunks = await read_body(scope, receive, limit_bytes=MAX_REVIEW_BYTES)
            if chunks is BodyRefused.TOO_LARGE:
                await reply(send, 413, body=f"review above {MAX_REVIEW_BYTES} bytes\n".encode(), close=True)
                return
            if isinstance(chunks, BodyRefused):
                return  # the apiserver went away: nobody to answer
            status, data = self.review(b"".join(chunks), mutating=path == "/mutate")
            await reply(send, status, body=data, content_type="application/json" if status == 200 else "text/plain")
        elif method != "GET":
            await reply(send, 405, body=b"GET only\n")
        elif path == "/healthz":
            await reply(send, 200, body=b"ok\n")
        elif path == "/readyz":
            ready = self.store.ready
            await reply(send, 200 if ready else 503, body=b"ok\n" if ready else b"state not loaded\n")
        else:
            await reply(send, 404, body=b"not found\n")

    def review(self, body: bytes, *, mutating: bool) -> tuple[int, bytes]:
        """(HTTP status, body) for one AdmissionReview."""
        try:
            review = self.decoder.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return 400, f"not an AdmissionReview: {exc}\n".encode()
        if review.api_version != ADMISSION_V1 or review.kind != "AdmissionReview":
            return 400, f"expected {ADMISSION_V1} AdmissionReview, got {review.api_version} {review.kind}\n".encode()
        if review.request is None or not review.request.uid:
            return 400, b"the AdmissionReview has no request uid to answer\n"
        request = review.request
        try:
            verdict = (self.mutator if mutating else self.validator).review(request)
        except Exception as exc:  # a bug in a rule must not become a 5xx the apiserver retries
            log.exception("review of %s %s/%s failed", request.kind.kind, request.namespace, request.name)
            verdict = Verdict(mutating, f"kilter could not review this object: {type(exc).__name__}: {exc}", 400)
        return 200, answer(request.uid, verdict, mutating=mutating)

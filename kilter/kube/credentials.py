"""The credentials an ``ApiServer`` presents, read again as client-go reads them, and what a 401 does.

Credentials rotate under a long-running process: a pod's projected
service-account token is replaced by the kubelet well before it expires
(an hour or less), an exec plugin's token lasts ~15 minutes (EKS, GKE,
AKS), certificate files are renewed in place. Each source is read again on
client-go's schedule:

* a token file (the pod's token, a kubeconfig's ``tokenFile``): when the
  token read is 50 s old (``NewCachedFileTokenSource``: a minute's period,
  10 s of leeway);
* an exec plugin: ``LEEWAY_S`` before the ``expirationTimestamp`` it gave
  (client-go waits until after it; a request sent in the last seconds
  would meet a 401), and never on schedule when it gave none;
* client certificate and key files: when either file changes (its inode,
  size or mtime), looked at no more than once a second (client-go's
  ``cachingCertificateLoader`` reads them at most once a second); a new pair
  is used by the connections opened after it;
* a token, certificate or password written in the kubeconfig itself: never.

When the API server answers 401, ``refused`` reads every source again at
once, unless one was read since that request was sent (client-go's
``ResetTokenOlderThan`` and ``maybeRefreshCreds``: many requests refused
together cause one reading), and tells whether the credentials changed;
``ApiServer`` then sends the request once more. A 401 that stands (the
second answer, or nothing new to send) is counted in ``unauthorized`` and
named by ``problems`` (``/readyz``) until a request gets through.

A source that cannot be read again keeps its last credentials (they may
still be good), is tried again after ``RETRY_S``, and is named by
``problems`` until it can be read; only the first reading, in
``api.connect``, fails with InputError.
"""

from __future__ import annotations

import base64
import logging
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kilter.kube import exec_credential
from kilter.kube.exec_credential import ExecConfig, PluginCredential
from kilter.kube.kubeconfig import User
from kilter.model.errors import InputError
from kilter.model.files import read_bounded

__all__ = ["FILE_PERIOD_S", "LEEWAY_S", "RETRY_S", "Credentials", "Presented", "of_user"]

log = logging.getLogger("kilter.kube")

FILE_PERIOD_S = 60.0
"""How long a token read from a file is taken as current (client-go: half the time between the kubelet's refresh
of a projected token and its expiry at the default lifetime)."""
LEEWAY_S = 10.0
"""How long before the end of that period, or of an exec credential's life, the source is read again."""
RETRY_S = 1.0
"""How long a source that could not be read is left alone before the next try (a failing plugin is not run for
every request)."""
CHECK_FILES_S = 1.0
MAX_TOKEN_BYTES = 64 * 1024  # a service-account JWT is about 1 KB
MAX_PEM_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Presented:
    """What one request carries: its ``Authorization`` value ("" for none), the TLS context holding the client
    certificate (None: the connection's own, without one), and when it was taken (to judge a 401 by)."""

    authorization: str
    tls: ssl.SSLContext | None
    generation: int
    """Counts changes of what is presented: a 401 to an older one is worth a retry with the current one."""
    reads: int
    """Counts readings of the sources: one since this was presented makes another one pointless."""


class Source(Protocol):
    """One place credentials come from, and when it is worth reading again."""

    what: str

    def due(self, now: float, wall: float) -> bool:
        """Whether to read it again now (``now`` monotonic, ``wall`` Unix seconds), before anyone is refused."""
        ...

    def read(self, now: float) -> PluginCredential:
        """Its credentials now; InputError, one line, when it cannot give them."""
        ...


class Written:
    """Credentials the kubeconfig holds itself: read once."""

    def __init__(self, issued: PluginCredential, what: str) -> None:
        self.issued, self.what = issued, what

    def due(self, now: float, wall: float) -> bool:
        return False

    def read(self, now: float) -> PluginCredential:
        return self.issued


class TokenFile:
    """A token in a file that is replaced while kilter runs (``fileTokenSource`` behind ``cachingTokenSource``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.what = f"token file {path}"
        self.read_at = -float("inf")

    def due(self, now: float, wall: float) -> bool:
        return now >= self.read_at + FILE_PERIOD_S - LEEWAY_S

    def read(self, now: float) -> PluginCredential:
        self.read_at = now
        token = read_bounded(self.path, MAX_TOKEN_BYTES).decode("utf-8", "replace").strip()
        if not token:
            raise InputError(f"{self.what} is empty")
        return PluginCredential(token, b"", b"", None)


class CertFiles:
    """A client certificate and key in files renewed in place: read again when either changes."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.cert, self.key = cert, key
        self.what = f"client certificate {cert}"
        self.checked_at = -float("inf")
        self.seen: tuple[tuple[int, ...], ...] = ()

    def _stamp(self) -> tuple[tuple[int, ...], ...]:
        out: list[tuple[int, ...]] = []
        for path in (self.cert, self.key):
            try:
                info = os.stat(path)
            except OSError:
                out.append(())
                continue
            out.append((info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns))
        return tuple(out)

    def due(self, now: float, wall: float) -> bool:
        if now < self.checked_at + CHECK_FILES_S:
            return False
        self.checked_at = now
        return self._stamp() != self.seen

    def read(self, now: float) -> PluginCredential:
        self.checked_at, self.seen = now, self._stamp()
        return PluginCredential("", read_bounded(self.cert, MAX_PEM_BYTES), read_bounded(self.key, MAX_PEM_BYTES), None)


class ExecPlugin:
    """An exec plugin's credentials, run again ``LEEWAY_S`` before they expire."""

    def __init__(self, config: ExecConfig, run: Callable[[ExecConfig], PluginCredential] = exec_credential.run) -> None:
        self.config, self.run = config, run
        self.what = f"exec plugin {config.command}"
        self.expires_at: float | None = None

    def due(self, now: float, wall: float) -> bool:
        return self.expires_at is not None and wall >= self.expires_at - LEEWAY_S

    def read(self, now: float) -> PluginCredential:
        issued = self.run(self.config)
        self.expires_at = issued.expires_at
        return issued


def of_user(
    user: User,
    *,
    tls: Callable[[], ssl.SSLContext] | None,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
) -> Credentials:
    """The sources of a kubeconfig user, in client-go's precedence (``User``); ``tls`` makes the connection's
    context (CA, verification) that a client certificate is added to; None for plain HTTP."""
    sources: list[Source] = []
    if user.token_file is not None:
        sources.append(TokenFile(user.token_file))
    elif user.token:
        sources.append(Written(PluginCredential(user.token, b"", b"", None), "the kubeconfig's token"))
    if user.cert_file is not None and user.key_file is not None and not user.cert_data and not user.key_data:
        sources.append(CertFiles(user.cert_file, user.key_file))  # client-go reloads a pair only when both are files
    elif user.cert_data or user.cert_file is not None:
        cert = user.cert_data or _pem(user.cert_file)
        key = user.key_data or _pem(user.key_file)
        sources.append(Written(PluginCredential("", cert, key, None), "the kubeconfig's client certificate"))
    if user.exec is not None:
        sources.append(ExecPlugin(user.exec))
    basic = ""
    if user.username and user.token_file is None and not user.token:  # a token wins over basic auth, as in client-go
        basic = "Basic " + base64.b64encode(f"{user.username}:{user.password}".encode()).decode()
    return Credentials(sources, basic=basic, tls=tls, clock=clock, wall=wall)


def _pem(path: Path | None) -> bytes:
    return read_bounded(path, MAX_PEM_BYTES) if path is not None else b""


class Credentials:
    """What requests present, from ``sources``, read again when due or refused; thread-safe (one lock: a plugin
    runs once however many requests wait for it, as in client-go)."""

    def __init__(
        self,
        sources: Sequence[Source],
        *,
        basic: str = "",
        tls: Callable[[], ssl.SSLContext] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.sources = list(sources)
        self.basic = basic
        self.make_tls = tls
        self.clock, self.wall = clock, wall
        self.unauthorized = 0
        """401s that stood after the credentials were read again (or had nothing new to offer)."""
        self.refreshed = 0
        """Times what is presented changed after the first reading: a new token or certificate."""
        self.refresh_errors = 0
        """Readings of a source that failed (its last credentials kept)."""
        self.refused_on = ""
        """The request of the last 401 that stood; "" once a request got through."""
        self._lock = threading.Lock()
        self._issued: list[PluginCredential | None] = [None] * len(self.sources)
        self._failed: dict[int, tuple[float, str]] = {}  # source index -> (when, why), until it reads again
        self._stale: tuple[str, ...] = ()  # the whys of _failed, replaced whole: /readyz reads it without the lock
        self._pair: tuple[bytes, bytes] = (b"", b"")
        self._tls: ssl.SSLContext | None = None
        self._presented: Presented | None = None
        self._reads = 0

    def current(self) -> Presented:
        """What the next request presents, after reading again whatever source is due."""
        with self._lock:
            self._refresh(force=False)
            assert self._presented is not None
            return self._presented

    def refused(self, presented: Presented) -> bool:
        """The API server answered 401 to ``presented``: read every source again, unless one was read since it was
        presented; whether what is presented now differs (so that the request is worth sending again)."""
        with self._lock:
            if presented.reads == self._reads:
                self._refresh(force=True)
            assert self._presented is not None
            return self._presented.generation != presented.generation

    def standing(self, request: str) -> None:
        """A 401 to ``request`` (``METHOD path``) stood: counted, and named on /readyz until a request gets
        through."""
        self.unauthorized += 1
        if self.refused_on != request:
            log.error("the API server refuses kilter's credentials (401 Unauthorized): %s", request)
        self.refused_on = request

    def accepted(self) -> None:
        """A request got through (any answer but 401)."""
        if self.refused_on:
            log.info("the API server accepts kilter's credentials again")
            self.refused_on = ""

    def problems(self) -> list[str]:
        """What is wrong with the credentials, one line each, for ``/readyz``; empty when nothing is. Never waits
        for the lock (a plugin may be running): it reads what the last reading left."""
        out = []
        if self.refused_on:
            out.append(
                f"credentials refused: the API server answered 401 Unauthorized to {self.refused_on} after kilter "
                f"read its credentials again ({self.unauthorized} refused so far)"
            )
        return out + [f"credentials not read again: {why}" for why in self._stale]

    def _refresh(self, *, force: bool) -> None:
        now, wall = self.clock(), self.wall()
        for i, source in enumerate(self.sources):
            held = self._issued[i]
            failed = self._failed.get(i)
            if held is not None:
                if failed is not None and now < failed[0] + RETRY_S:
                    continue
                if failed is None and not force and not source.due(now, wall):
                    continue
            self._reads += 1
            try:
                issued = source.read(now)
                if issued.cert_pem and (issued.cert_pem, issued.key_pem) != self._pair:
                    self._tls = self._context(issued, source.what)
                    self._pair = (issued.cert_pem, issued.key_pem)
            except InputError as exc:
                if held is None:
                    raise
                self.refresh_errors += 1
                if failed is None or failed[1] != exc.message:
                    log.warning("credentials not read again, the last ones kept: %s", exc.message)
                self._failed[i] = (now, exc.message)
                continue
            if failed is not None:
                log.info("%s read again", source.what)
                del self._failed[i]
            self._issued[i] = issued
        self._stale = tuple(why for _, why in sorted(self._failed.values()))
        self._present()

    def _present(self) -> None:
        token = next((issued.token for issued in self._issued if issued is not None and issued.token), "")
        authorization = f"Bearer {token}" if token else self.basic
        last = self._presented
        if last is not None and (last.authorization, last.tls) == (authorization, self._tls):
            if last.reads != self._reads:
                self._presented = Presented(authorization, self._tls, last.generation, self._reads)
            return
        generation = 0 if last is None else last.generation + 1
        if last is not None:
            self.refreshed += 1
            log.info("new credentials from %s", ", ".join(s.what for s in self.sources) or "nowhere")
        self._presented = Presented(authorization, self._tls, generation, self._reads)

    def _context(self, issued: PluginCredential, what: str) -> ssl.SSLContext:
        """The connection's context with this certificate and key. Python's ssl loads a pair only from a file:
        a private temporary one, removed at once."""
        if self.make_tls is None:
            raise InputError(f"{what}: a client certificate needs an https server")
        context = self.make_tls()
        fd, name = tempfile.mkstemp(prefix="kilter-client-", suffix=".pem")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(issued.cert_pem.rstrip(b"\n") + b"\n" + issued.key_pem)
            context.load_cert_chain(name)
        except (ssl.SSLError, OSError) as exc:
            raise InputError(f"{what}: cannot use the certificate and key: {exc}") from None
        finally:
            os.unlink(name)
        return context

"""The keys that sign ``kilter.dev/plan`` records, so kilter adopts only records it wrote itself (issue #17).

A plan record pins a gang's pods to nodes and reserves their GPUs; a record
a tenant wrote would let it pick its racks. Records are therefore signed
with HMAC-SHA256 over their content and the UID of the object they are on
(``records.signed_message``), and a record whose signature no key verifies
is ignored. Why a MAC and not field ownership: managed fields name a field
manager, but ``fieldManager=kilter`` is just a query parameter any writer may
send, so server-side apply proves nothing about who wrote a value. The UID
binds a record to its object: copying a signed record onto another object
(a pod of one's own, a Workload made again under the same name) breaks it.

The keys come from a file (``--plan-key-file``, a Secret mounted into the
pod): one key per line, at least 32 characters each (``openssl rand -hex
32``); blank lines are skipped. The first key signs, every key verifies, so
a key is rotated by putting the new one first, waiting out the gang timeout
(records older than that are never adopted anyway), then dropping the old.
With ``--plan-key-secret`` the keys live in a Secret that kilter creates,
re-reads and rotates itself (``kilter.gangs.key_secret``), swapping them
into the one ``PlanKeys`` every reader holds (``replace``).
Without either, each process draws a random key: records it wrote verify,
nothing from before a restart or from another replica does (logged once).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from collections.abc import Sequence
from pathlib import Path

from kilter.model.errors import InputError

__all__ = ["MIN_KEY_CHARS", "PlanKeys"]

log = logging.getLogger("kilter.plans")

MIN_KEY_CHARS = 32  # 32 hex characters are 128 bits: below that a key could be guessed offline from one record


class PlanKeys:
    """HMAC-SHA256 keys: ``sign`` with the first, ``verify`` with any."""

    def __init__(self, keys: Sequence[bytes], *, source: str) -> None:
        if not keys:
            raise InputError(f"{source}: no plan key")
        self._keys = tuple(keys)
        self.source = source

    @staticmethod
    def parse(text: str, *, source: str) -> tuple[bytes, ...]:
        """The keys of key-file text (one per line, blank lines and surrounding spaces skipped), first first;
        InputError naming ``source`` (a flag and its file or Secret) if it holds no key or a key is too short."""
        keys: list[bytes] = []
        for number, line in enumerate(text.splitlines(), start=1):
            key = line.strip()
            if not key:
                continue
            if len(key) < MIN_KEY_CHARS:
                raise InputError(f"{source}: the key on line {number} is shorter than {MIN_KEY_CHARS}")
            keys.append(key.encode())
        if not keys:
            raise InputError(f"{source}: no key in it")
        return tuple(keys)

    @classmethod
    def from_file(cls, path: Path) -> PlanKeys:
        """The keys of a key file; InputError if it cannot be read, holds no key, or a key is too short."""
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"--plan-key-file {path}: {exc}") from None
        return cls(cls.parse(text, source=f"--plan-key-file {path}"), source=str(path))

    @classmethod
    def ephemeral(cls, *, announce: bool = True) -> PlanKeys:
        """A random key of this process alone (no ``--plan-key-file``); said in the log unless ``announce`` is off
        (a default soon replaced by the keys the server loads)."""
        if announce:
            log.warning(
                "no --plan-key-file or --plan-key-secret: plan records are signed with a key of this process only; "
                "records written before a restart, or by another replica, will not be adopted"
            )
        return cls([secrets.token_hex(32).encode()], source="a random key of this process")

    @classmethod
    def load(cls, path: Path | None) -> PlanKeys:
        """The keys of ``path``, or a random key of this process when None."""
        return cls.ephemeral() if path is None else cls.from_file(path)

    @property
    def keys(self) -> tuple[bytes, ...]:
        """The keys as now held, the signing one first."""
        return self._keys

    def replace(self, keys: Sequence[bytes]) -> None:
        """Hold ``keys`` from now on (a re-read or rotated Secret, ``kilter.gangs.key_secret``).

        In place, because the gang book and the recorder share this object:
        both sign and verify with the new keys from their next call. One
        attribute is swapped whole, so a reader on another thread sees the old
        tuple or the new one, never a mix.
        """
        if not keys:
            raise InputError(f"{self.source}: no plan key")
        self._keys = tuple(keys)

    def sign(self, message: bytes) -> str:
        """The hex HMAC-SHA256 of ``message`` under the first key."""
        return hmac.new(self._keys[0], message, hashlib.sha256).hexdigest()

    def verify(self, message: bytes, signature: str) -> bool:
        """Whether any key signed ``message`` as ``signature`` (compared in constant time)."""
        given = signature.encode("ascii", "replace")
        held = self._keys  # one tuple for the whole check, even if ``replace`` runs meanwhile
        return any(
            hmac.compare_digest(hmac.new(key, message, hashlib.sha256).hexdigest().encode(), given) for key in held
        )

"""Reading a file an operator or a mount hands kilter: a regular file, of bounded size, or a clear refusal.

A path kilter re-reads while it serves (``--config``, ``--snapshot``) is
whatever the file system holds there at that moment; a ConfigMap swap, a
mistake or an attacker with write access to the mount can leave a FIFO
(whose ``open`` or ``read`` blocks until someone writes), a device such as
``/dev/zero`` (endless bytes) or a file larger than memory. ``read_bounded``
opens without blocking, checks on the open descriptor (so a swap between a
check and the read cannot slip through) that it is a regular file within
the limit, and reads at most one byte past the limit, whatever the size
claimed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kilter.model.errors import InputError

__all__ = ["open_regular", "read_bounded"]

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def open_regular(path: Path, limit: int) -> tuple[int, int]:
    """A descriptor open for reading on the regular file at ``path`` (symlinks followed) whose size is at most
    ``limit``, and that size; InputError, one line, otherwise. The caller closes the descriptor."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a regular file")
            raise InputError(f"{path} is {kind}, not a regular file; it is not read")
        if info.st_size > limit:
            raise InputError(f"{path} is {info.st_size} bytes; the limit is {limit}")
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of the regular file at ``path`` (symlinks followed); InputError, one line, when it cannot be read,
    is not a regular file, or holds more than ``limit`` bytes (counted as read, whatever its size claims)."""
    fd, size_hint = open_regular(path, limit)
    try:
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(max(size_hint + 1 - size, 1 << 16), limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise InputError(f"{path} grew past {limit} bytes as it was read; the limit is {limit}")
        return b"".join(chunks)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)

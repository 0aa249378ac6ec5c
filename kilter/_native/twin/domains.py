"""Reference twin of ``kilter._native.domains`` on Python int bitsets."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

DETACHED = 1
WORD_BITS = 64

IntArray = npt.NDArray[np.int32]


def _slot_mask(start: int, length: int) -> int:
    return ((1 << length) - 1) << start


class FleetBitmap:
    """Each domain row is one Python int; bit ``slot * tb + k`` is GPU k of that slot."""

    def __init__(
        self,
        node_domain: Sequence[int] | npt.ArrayLike,
        node_gpus: Sequence[int] | npt.ArrayLike,
        node_used: Sequence[int] | npt.ArrayLike,
        node_usable: Sequence[int] | npt.ArrayLike,
        node_start: Sequence[int] | npt.ArrayLike,
        tray_bits: Sequence[int] | npt.ArrayLike,
        platform: Sequence[int] | npt.ArrayLike,
        flags: Sequence[int] | npt.ArrayLike,
        group: npt.ArrayLike,
    ) -> None:
        self.node_start = [int(x) for x in np.asarray(node_start).ravel()]
        self.n_domains = len(self.node_start) - 1
        self.node_domain = [int(x) for x in np.asarray(node_domain).ravel()]
        self.n_nodes = len(self.node_domain)
        self.node_gpus = [int(x) for x in np.asarray(node_gpus).ravel()]
        self.node_used = [int(x) for x in np.asarray(node_used).ravel()]
        self.node_usable = [int(x) for x in np.asarray(node_usable).ravel()]
        self.tray_bits = [int(x) for x in np.asarray(tray_bits).ravel()]
        self.platform = [int(x) for x in np.asarray(platform).ravel()]
        self.flags = [int(x) for x in np.asarray(flags).ravel()]
        grp = np.asarray(group, dtype=np.int32)
        if grp.ndim != 2 or grp.shape[1] != self.n_domains:
            raise ValueError("group must have shape (n_levels, n_domains)")
        self.group = [[int(x) for x in row] for row in grp]
        self.n_levels = len(self.group)
        self.n_groups = [max(row, default=-1) + 1 for row in self.group]
        self.max_groups = max([1, *self.n_groups])
        self.max_gpus = max(self.node_gpus, default=0)
        bits = [(self.node_start[d + 1] - self.node_start[d]) * self.tray_bits[d] for d in range(self.n_domains)]
        self.n_words = max(1, max(((b + 63) // 64 for b in bits), default=1))
        self.free = [0] * self.n_domains
        self.healthy = [0] * self.n_domains
        self.domain_free = [0] * self.n_domains
        self.domain_usable = [0] * self.n_domains
        self.hist = [[0] * (self.max_gpus + 1) for _ in range(self.n_domains)]
        self.group_free = [[0] * self.max_groups for _ in range(self.n_levels)]
        self.group_usable = [[0] * self.max_groups for _ in range(self.n_levels)]
        for i in range(self.n_nodes):
            self.write_node(i)

    def _slot(self, node: int) -> tuple[int, int, int]:
        d = self.node_domain[node]
        tb = self.tray_bits[d]
        return d, (node - self.node_start[d]) * tb, tb

    def node_free(self, node: int) -> int:
        d, start, tb = self._slot(node)
        return (self.free[d] & _slot_mask(start, tb)).bit_count()

    def write_node(self, node: int) -> None:
        d, start, tb = self._slot(node)
        mask = _slot_mask(start, tb)
        old_h = (self.healthy[d] & mask).bit_count()
        old_f = (self.free[d] & mask).bit_count()
        new_h = self.node_gpus[node] if self.node_usable[node] else 0
        new_f = self.node_gpus[node] - self.node_used[node] if self.node_usable[node] else 0
        self.healthy[d] = (self.healthy[d] & ~mask) | _slot_mask(start, new_h)
        self.free[d] = (self.free[d] & ~mask) | _slot_mask(start, new_f)
        self.domain_free[d] += new_f - old_f
        self.domain_usable[d] += new_h - old_h
        if old_h > 0:
            self.hist[d][old_f] -= 1
        if new_h > 0:
            self.hist[d][new_f] += 1
        for level in range(self.n_levels):
            g = self.group[level][d]
            if g >= 0:
                self.group_free[level][g] += new_f - old_f
                self.group_usable[level][g] += new_h - old_h

    def take(self, node: int, gpus: int) -> int:
        if not self.node_usable[node] or self.node_gpus[node] - self.node_used[node] < gpus:
            return -1
        self.node_used[node] += gpus
        self.write_node(node)
        return 0

    def give(self, node: int, gpus: int) -> int:
        if self.node_used[node] < gpus:
            return -1
        self.node_used[node] -= gpus
        self.write_node(node)
        return 0

    def is_wholly_free(self, domain: int) -> bool:
        return self.domain_usable[domain] > 0 and self.domain_free[domain] == self.domain_usable[domain]

    def allocate(self, node: int, gpus: int) -> None:
        if not 0 <= node < self.n_nodes:
            raise IndexError(node)
        if gpus < 0 or self.take(node, gpus) != 0:
            raise ValueError(f"cannot book {gpus} GPUs on node {node}")

    def release(self, node: int, gpus: int) -> None:
        if not 0 <= node < self.n_nodes:
            raise IndexError(node)
        if gpus < 0 or self.give(node, gpus) != 0:
            raise ValueError(f"cannot release {gpus} GPUs on node {node}")

    def set_usable(self, node: int, usable: bool) -> None:
        if not 0 <= node < self.n_nodes:
            raise IndexError(node)
        self.node_usable[node] = 1 if usable else 0
        self.write_node(node)

    def node_free_gpus(self, node: int) -> int:
        return self.node_free(node)

    def capacity(self, gpus: int) -> IntArray:
        return np.array(
            [sum(self.hist[d][k] * (k // gpus) for k in range(gpus, self.max_gpus + 1)) for d in range(self.n_domains)],
            dtype=np.int32,
        )

    @property
    def free_words(self) -> npt.NDArray[np.uint64]:
        """Rows split into 64-bit words, low word first, to compare with the native layout."""
        return self._words(self.free)

    @property
    def healthy_words(self) -> npt.NDArray[np.uint64]:
        return self._words(self.healthy)

    def _words(self, rows: list[int]) -> npt.NDArray[np.uint64]:
        out = np.zeros((self.n_domains, self.n_words), dtype=np.uint64)
        for d, row in enumerate(rows):
            for w in range(self.n_words):
                out[d, w] = (row >> (64 * w)) & 0xFFFFFFFFFFFFFFFF
        return out

    @property
    def domain_free_gpus(self) -> IntArray:
        return np.array(self.domain_free, dtype=np.int32)

    @property
    def domain_usable_gpus(self) -> IntArray:
        return np.array(self.domain_usable, dtype=np.int32)

    @property
    def node_used_gpus(self) -> IntArray:
        return np.array(self.node_used, dtype=np.int32)

    @property
    def free_histogram(self) -> IntArray:
        return np.array(self.hist, dtype=np.int32).reshape(self.n_domains, self.max_gpus + 1)

    def group_free_gpus(self, level: int) -> npt.NDArray[np.int64]:
        return np.array(self.group_free[level][: self.n_groups[level]], dtype=np.int64)

    def group_usable_gpus(self, level: int) -> npt.NDArray[np.int64]:
        return np.array(self.group_usable[level][: self.n_groups[level]], dtype=np.int64)

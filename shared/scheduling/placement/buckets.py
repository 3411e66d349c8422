"""Node positions grouped by an integer key (free GPUs of a type, free CPUs, free memory).

A search starts at the first group that can serve a task instead of scanning every node, and counting
"how many nodes have fewer than k" costs one step per distinct key, not one per node. Positions in a
group are kept sorted, so the order a search sees depends only on the cluster's state, never on the
history of holds that led to it (a placement replays from the same state and seed).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator


class Buckets:
    __slots__ = ("groups", "keys")

    def __init__(self) -> None:
        self.groups: dict[int, list[int]] = {}
        self.keys: list[int] = []  # sorted; only keys whose group is not empty

    def add(self, key: int, pos: int) -> None:
        group = self.groups.get(key)
        if group is None:
            self.groups[key] = [pos]
            insort(self.keys, key)
        else:
            insort(group, pos)

    def remove(self, key: int, pos: int) -> None:
        group = self.groups[key]
        del group[bisect_left(group, pos)]
        if not group:
            del self.groups[key]
            del self.keys[bisect_left(self.keys, key)]

    def move(self, old: int, new: int, pos: int) -> None:
        if old != new:
            self.remove(old, pos)
            self.add(new, pos)

    def groups_from(self, lo: int, *, ascending: bool) -> Iterator[list[int]]:
        """The groups whose key is >= ``lo``: smallest key first when ``ascending``, else largest first."""
        keys = self.keys[bisect_left(self.keys, lo):]
        for key in keys if ascending else reversed(keys):
            yield self.groups[key]

    def count_below(self, hi: int) -> int:
        """How many positions have a key < ``hi``."""
        keys = self.keys
        return sum(len(self.groups[k]) for k in keys[: bisect_left(keys, hi)])

    def below(self, hi: int) -> Iterator[int]:
        """The positions whose key is < ``hi``."""
        keys = self.keys
        for k in keys[: bisect_left(keys, hi)]:
            yield from self.groups[k]

"""Where a position of a newest-first job list falls in creation time: the pure part of deep pages.

The ended jobs (those the store has ``counted``: their user, state and creation time never change
again) are counted by creation time in three levels of buckets, per owner: :data:`EVERYONE` and each
user. One small document per owner counts its jobs per *top* bucket (2^31 ms, about 25 days: 15 a year);
one per owner and top bucket counts them per *mid* bucket (2^24 ms, about 4.7 hours: at most 128); one
per owner and mid bucket counts them per *fine* bucket (2^14 ms, about 16 seconds: at most 1,024). Each
holds ``c: {bucket: n}`` and, per state, ``cs: {state: {bucket: n}}``, so the four filters (none, user,
state, user and state) read the same documents. Counting a job moves six counters (three documents for
everyone, three for its user): a fixed cost whatever the history.

Finding position ``p`` reads one document per level and picks the newest-first bucket that holds ``p``:
how many jobs of the list come before that fine bucket is then known exactly, and only that bucket's
jobs are read to skip the rest. Jobs not counted yet (the active ones: few) are added to the counts per
bucket as they are read (:func:`tally`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

LEVEL_BITS = (31, 24, 14)  # top, mid, fine buckets: 2^bits milliseconds wide
KINDS = ("A", "T", "M")  # the document of each level: one per owner, per top bucket, per mid bucket
EVERYONE = "*"  # the owner whose counts are everyone's jobs (a user name cannot be "*")


@dataclass(frozen=True)
class Locus:
    """Where a position falls: the fine bucket ``[lo_ms, hi_ms)`` (or, where the counts disagreed, a wider
    span ending at ``hi_ms``), and how many of the list's jobs in it, newest first, come before it."""

    lo_ms: int
    hi_ms: int
    skip: int


def doc_id(level: int, owner: str, created_ms: int) -> str:
    """The id of the level's document that counts ``created_ms`` for ``owner``."""
    if level == 0:
        return f"{KINDS[0]}|{owner}"
    return f"{KINDS[level]}|{owner}|{created_ms >> LEVEL_BITS[level - 1]}"


def increments(created_ms: int, user: str, state: str, delta: int) -> dict[str, dict[str, int]]:
    """The ``$inc`` of each counting document for one job counted (``delta`` 1) or removed (-1)."""
    out: dict[str, dict[str, int]] = {}
    for owner in (EVERYONE, user):
        for level, bits in enumerate(LEVEL_BITS):
            bucket = created_ms >> bits
            out[doc_id(level, owner, created_ms)] = {f"c.{bucket}": delta, f"cs.{state}.{bucket}": delta}
    return out


def merged_increments(jobs: Iterable[tuple[int, str, str]]) -> dict[str, Counter[str]]:
    """The increments of many jobs ``(created_ms, user, state)`` at once, one ``$inc`` per document."""
    out: dict[str, Counter[str]] = {}
    for created_ms, user, state in jobs:
        for doc, inc in increments(created_ms, user, state, 1).items():
            out.setdefault(doc, Counter()).update(inc)
    return out


def documents(incs: Mapping[str, Mapping[str, int]]) -> list[dict[str, Any]]:
    """Counting documents as they are after ``incs`` applied to nothing (``"cs.S.b": n`` -> ``{cs: {S: {b: n}}}``)."""
    out = []
    for doc, inc in incs.items():
        full: dict[str, Any] = {"_id": doc}
        for path, n in inc.items():
            *parents, last = path.split(".")
            node = full
            for name in parents:
                node = node.setdefault(name, {})
            node[last] = n
        out.append(full)
    return out


def bucket_counts(doc: Mapping[str, Any] | None, state: str | None) -> dict[int, int]:
    """A counting document's buckets and counts, of every job or of one state's."""
    if doc is None:
        return {}
    counts = doc.get("c", {}) if state is None else doc.get("cs", {}).get(state, {})
    return {int(bucket): int(n) for bucket, n in counts.items() if int(n) > 0}


def tally(times: Iterable[int], level: int, near_ms: int) -> Counter[int]:
    """Uncounted jobs (their creation times) per bucket of ``level``, of those in the same document as
    ``near_ms`` (all of them at level 0, else those of the bucket above that holds ``near_ms``)."""
    bits = LEVEL_BITS[level]
    if level == 0:
        return Counter(t >> bits for t in times)
    parent = LEVEL_BITS[level - 1]
    return Counter(t >> bits for t in times if t >> parent == near_ms >> parent)


def combined(doc: Mapping[str, Any] | None, state: str | None, extra: Counter[int]) -> dict[int, int]:
    counts = bucket_counts(doc, state)
    for bucket, n in extra.items():
        counts[bucket] = counts.get(bucket, 0) + n
    return counts


def pick(counts: Mapping[int, int], position: int) -> tuple[int, int] | None:
    """The bucket, newest first, that holds ``position`` (0: the newest job), with how many jobs the
    newer buckets hold; None when the buckets hold no more than ``position`` jobs."""
    before = 0
    for bucket in sorted(counts, reverse=True):
        n = max(0, counts[bucket])
        if position < before + n:
            return bucket, before
        before += n
    return None


def newer(counts: Mapping[int, int], bucket: int) -> int:
    """How many jobs the buckets newer than ``bucket`` hold."""
    return sum(max(0, n) for b, n in counts.items() if b > bucket)


def span(level: int, bucket: int) -> tuple[int, int]:
    """The milliseconds ``[lo, hi)`` of a bucket of ``level``."""
    bits = LEVEL_BITS[level]
    return bucket << bits, (bucket + 1) << bits

"""The pure part of deep pages: which counters a job moves, and which bucket holds a position."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from shared.db.lists.buckets import (
    EVERYONE,
    LEVEL_BITS,
    bucket_counts,
    combined,
    doc_id,
    documents,
    increments,
    merged_increments,
    newer,
    pick,
    span,
    tally,
)

pytestmark = pytest.mark.unit

T = 1_790_000_123_456  # a creation time


def test_a_job_moves_three_documents_for_everyone_and_three_for_its_user() -> None:
    incs = increments(T, "alice", "FAILED", 1)
    top, mid, fine = (T >> bits for bits in LEVEL_BITS)
    assert incs == {
        f"A|{EVERYONE}": {f"c.{top}": 1, f"cs.FAILED.{top}": 1},
        f"T|{EVERYONE}|{top}": {f"c.{mid}": 1, f"cs.FAILED.{mid}": 1},
        f"M|{EVERYONE}|{mid}": {f"c.{fine}": 1, f"cs.FAILED.{fine}": 1},
        "A|alice": {f"c.{top}": 1, f"cs.FAILED.{top}": 1},
        f"T|alice|{top}": {f"c.{mid}": 1, f"cs.FAILED.{mid}": 1},
        f"M|alice|{mid}": {f"c.{fine}": 1, f"cs.FAILED.{fine}": 1},
    }
    assert all(v == -1 for inc in increments(T, "alice", "FAILED", -1).values() for v in inc.values())


def test_a_level_document_is_the_one_of_the_bucket_above() -> None:
    assert doc_id(0, "bob", T) == "A|bob"
    assert doc_id(1, "bob", T) == f"T|bob|{T >> LEVEL_BITS[0]}"
    assert doc_id(2, "bob", T) == f"M|bob|{T >> LEVEL_BITS[1]}"
    lo, hi = span(2, T >> LEVEL_BITS[2])
    assert lo <= T < hi and hi - lo == 2 ** LEVEL_BITS[2]


def test_many_jobs_merge_into_one_increment_per_document_and_into_whole_documents() -> None:
    jobs = [(T, "a", "SUCCEEDED"), (T + 1, "a", "SUCCEEDED"), (T, "b", "FAILED")]
    merged = merged_increments(jobs)
    assert merged[f"A|{EVERYONE}"] == Counter({f"c.{T >> LEVEL_BITS[0]}": 3, f"cs.SUCCEEDED.{T >> LEVEL_BITS[0]}": 2,
                                              f"cs.FAILED.{T >> LEVEL_BITS[0]}": 1})
    [whole] = [d for d in documents(merged) if d["_id"] == "A|a"]
    top = str(T >> LEVEL_BITS[0])
    assert whole == {"_id": "A|a", "c": {top: 2}, "cs": {"SUCCEEDED": {top: 2}}}
    assert bucket_counts(whole, None) == {int(top): 2}
    assert bucket_counts(whole, "SUCCEEDED") == {int(top): 2}
    assert bucket_counts(whole, "FAILED") == {}
    assert bucket_counts(None, None) == {}


@pytest.mark.parametrize(("counts", "position", "expect"), [
    ({5: 2, 7: 3, 6: 0}, 0, (7, 0)),  # newest bucket first
    ({5: 2, 7: 3, 6: 0}, 2, (7, 0)),
    ({5: 2, 7: 3, 6: 0}, 3, (5, 3)),  # an empty bucket is passed over
    ({5: 2, 7: 3, 6: 0}, 4, (5, 3)),
    ({5: 2, 7: 3, 6: 0}, 5, None),  # past the end
    ({}, 0, None),
    ({5: -1, 4: 1}, 0, (4, 0)),  # a count gone below zero (a missed write) counts as none
])
def test_pick_finds_the_bucket_of_a_position_newest_first(counts: dict[int, int], position: int,
                                                          expect: tuple[int, int] | None) -> None:
    assert pick(counts, position) == expect


def test_uncounted_jobs_are_tallied_in_the_document_that_holds_them() -> None:
    top_ms = (T >> LEVEL_BITS[0]) << LEVEL_BITS[0]
    times = [T, T + 1, top_ms - 1]  # the last is in the top bucket before
    assert tally(times, 0, T) == Counter({T >> LEVEL_BITS[0]: 2, (top_ms - 1) >> LEVEL_BITS[0]: 1})
    assert tally(times, 1, T) == Counter({T >> LEVEL_BITS[1]: 2})
    doc = {"c": {str(T >> LEVEL_BITS[1]): 4}}
    assert combined(doc, None, tally(times, 1, T)) == {T >> LEVEL_BITS[1]: 6}
    assert newer({1: 2, 3: 4, 5: 6}, 3) == 6


def test_descending_the_three_levels_finds_every_position_of_a_random_history() -> None:
    """The levels as the store reads them, built here from creation times: each position lands in the fine
    bucket of the job at that position, with the jobs of newer fine buckets counted before it."""
    rng = random.Random(7)
    times = sorted((T - rng.randrange(60 * 86_400_000) for _ in range(2000)), reverse=True)
    docs = {d["_id"]: d for d in documents(merged_increments((t, "u", "SUCCEEDED") for t in times))}
    for position in [0, 1, 17, 999, 1500, 1999]:
        remaining, near = position, 0
        for level in range(3):
            picked = pick(bucket_counts(docs.get(doc_id(level, EVERYONE, near)), None), remaining)
            assert picked is not None
            bucket, before = picked
            remaining -= before
            near = span(level, bucket)[0]
        lo, hi = span(2, bucket)
        assert lo <= times[position] < hi
        assert times[position - remaining] < hi and (position - remaining == 0 or times[position - remaining - 1] >= hi)
    assert pick(bucket_counts(docs[f"A|{EVERYONE}"], None), 2000) is None


def test_the_bucket_arithmetic_is_a_pure_core() -> None:
    from tests.unit.test_pure_cores import test_pure_core_imports_no_io

    test_pure_core_imports_no_io("shared.db.lists.buckets")

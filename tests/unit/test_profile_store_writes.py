"""A task's profile as its document (shared.db.profiles), and the write contract: the operations the
launcher sends, applied to the stored document one after another, keep it equal to the launcher's profile.

The update operators are simulated here in a few lines ($set; $push with $each and a negative $slice, as
MongoDB documents them); the integration suite runs the same writes against the real server. The
operations' filter and update are read from pymongo's ``_filter`` / ``_doc`` (it has no public accessor).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pymongo import InsertOne, UpdateOne

from services.launcher.engine.enginestats import Counters, GpuReading
from services.launcher.profiling.samplestep import advance
from shared.db.profiles import LEVEL_FIELDS, Doc, ProfileWrite, TaskProfile
from shared.profiling.idle import GpuIdlePolicy, IdleState
from shared.profiling.series import LEVELS, Added, Level, Series, add
from shared.profiling.totals import TaskTotals
from shared.profiling.usage import Usage

pytestmark = pytest.mark.unit

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, ms
S = 10_000
POLICY = GpuIdlePolicy(below_percent=5.0, after_ms=60_000)


def make_profile(**fields: Any) -> TaskProfile:
    base: dict[str, Any] = {"_id": "alice~train/0/worker/1", "job_id": "alice~train", "attempt": 0, "role": "worker",
                            "index": 1, "node_id": "n1", "vc": "default", "cpus": 4, "gpus": (0, 1),
                            "mem_limit": 2**31, "interval_ms": S}
    return TaskProfile.model_validate({**base, **fields})


def point(i: int, cpu: float = 1.0, mem: int = 1000, **fields: Any) -> Usage:
    """The ``i``-th sample (1-based) of a task sampled every 10 s since T0."""
    return Usage(t_ms=T0 + i * S, span_ms=S, cpu=cpu, mem=mem, mem_peak=fields.pop("mem_peak", mem), **fields)


def series_of(n: int, levels: tuple[Level, ...] = LEVELS) -> Series:
    s = Series()
    for i in range(1, n + 1):
        s = add(s, point(i, cpu=i % 2 / 2, mem=1000 + i), levels).series
    return s


# --- the document --------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", [
    make_profile(),
    make_profile(gpus=(), mem_limit=0, vc=""),
    make_profile(series=series_of(1), last=point(1)),
    make_profile(series=series_of(1000), last=point(1000, cpu=0.0, mem=2000),
                 totals=TaskTotals(samples=1000, first_ms=T0, last_ms=T0 + 1000 * S, cpu_seconds=12_345.5,
                                   mem_peak=2000, gpu_held_seconds=20_000.0, gpu_used_seconds=10.25,
                                   gpu_measured_seconds=19_990.0),
                 idle=IdleState(since_ms=T0 + S, peak_percent=1.5, flagged=True, below_percent=5.0)),
    make_profile(series=series_of(3),
                 last=point(3, net_rx=1.5, net_tx=0.0, blk_read=None, gpu_util=99.5, gpu_mem=2**33)),
])
def test_document_round_trip(profile: TaskProfile) -> None:
    assert TaskProfile.from_document(profile.to_document()) == profile


def test_document_shape() -> None:
    p = make_profile(series=series_of(125), last=point(125, cpu=0.5, mem=1125))
    doc = p.to_document()
    assert set(doc) == {"_id", "job_id", "attempt", "role", "index", "task_attempt", "node_id", "vc", "cpus", "gpus",
                        "mem_limit", "interval_ms", "l0", "l1", "l2", "l3", "last", "totals", "idle"}
    assert [len(doc[name]) for name in LEVEL_FIELDS] == [119, 1, 0, 0]
    assert doc["l0"][-1] == point(125, cpu=0.5, mem=1125).row() == doc["last"]
    assert doc["l1"] == [[T0 + 6 * S, 6 * S, 0.25, 1004, 1006, None, None, None, None, None, None]]  # 1..6 merged


@pytest.mark.parametrize(("doc_changes", "series_size", "last"), [
    ({}, 0, None),
    ({name: [] for name in LEVEL_FIELDS}, 0, None),
    ({"l0": [point(1).row()]}, 1, None),
    ({"last": point(1).row()}, 0, point(1)),  # a summary (of_job projects the levels away)
    ({"extra": "ignored", "l9": [[1]]}, 0, None),
])
def test_from_partial_documents(doc_changes: Doc, series_size: int, last: Usage | None) -> None:
    doc = {"_id": "j/0/r/0", "job_id": "j", "attempt": 0, "role": "r", "index": 0, "node_id": "n",
           "interval_ms": S, **doc_changes}
    p = TaskProfile.from_document(doc)
    assert (p.series.size, p.last, p.totals, p.idle, p.gpus) == (series_size, last, TaskTotals(), IdleState(), ())


def test_the_document_keeps_rounded_figures() -> None:
    """Stored rows are rounded (cpu to 4 digits, rates to 2); a document read back writes the same document."""
    p = make_profile(series=add(Series(), point(1, cpu=1 / 3, net_rx=1 / 7)).series, last=point(1, cpu=1 / 3))
    doc = p.to_document()
    assert doc["l0"] == [[T0 + S, S, 0.3333, 1000, 1000, 0.14, None, None, None, None, None]]
    assert TaskProfile.from_document(doc).to_document() == doc


# --- the operations ---------------------------------------------------------------------------------


def state(p: TaskProfile) -> Doc:
    return {"last": p.last.row() if p.last else None, "totals": p.totals.model_dump(), "idle": p.idle.model_dump()}


def test_a_new_profile_is_inserted_whole() -> None:
    p = make_profile(series=series_of(1), last=point(1))
    added = Added(series=p.series, deeper=0)
    assert ProfileWrite(profile=p, new=True, added=added).operation() == InsertOne(p.to_document())
    assert ProfileWrite(profile=p, new=False, added=None).operation() == InsertOne(p.to_document())


@pytest.mark.parametrize(("n", "deeper", "set_levels"), [
    (2, 0, ()),
    (120, 0, ()),
    (121, 1, ("l1",)),
    (841, 2, ("l1", "l2")),
])
def test_an_update_appends_to_l0_and_rewrites_only_the_levels_that_changed(n: int, deeper: int,
                                                                           set_levels: tuple[str, ...]) -> None:
    before = series_of(n - 1)
    added = add(before, point(n, cpu=n % 2 / 2, mem=1000 + n))
    assert added.deeper == deeper
    p = make_profile(series=added.series, last=point(n))
    doc = p.to_document()
    expected = {"$set": {**state(p), **{name: doc[name] for name in set_levels}},
                "$push": {"l0": {"$each": [doc["l0"][-1]], "$slice": -len(doc["l0"])}}}
    assert ProfileWrite(profile=p, new=False, added=added).operation() == UpdateOne({"_id": p.id}, expected)


# --- the contract: the stored document follows the launcher's profile ---------------------------------


def apply(doc: Doc | None, op: InsertOne[Doc] | UpdateOne) -> Doc:
    """The document after ``op``, as the server applies it ($set, $push with $each and a negative $slice)."""
    if isinstance(op, InsertOne):
        assert doc is None, "an insert of a profile already stored (the server refuses it: duplicate _id)"
        return copy.deepcopy(op._doc)
    assert doc is not None, "an update of a profile never stored (it matches nothing)"
    assert op._filter == {"_id": doc["_id"]}
    update = op._doc
    assert isinstance(update, dict)
    assert set(update) <= {"$set", "$push"}
    sets, pushes = update.get("$set", {}), update.get("$push", {})
    assert not set(sets) & set(pushes), "the server refuses $set and $push on the same field"
    out = copy.deepcopy(doc)
    out.update(copy.deepcopy(sets))
    for field, spec in pushes.items():
        assert set(spec) == {"$each", "$slice"} and spec["$slice"] < 0
        grown = list(out.get(field) or []) + copy.deepcopy(spec["$each"])
        out[field] = grown[max(0, len(grown) + spec["$slice"]):]
    return out


def readings(n: int) -> list[Counters]:
    """A task's engine readings every 10 s (ns not on whole ms, CPU and memory varying)."""
    t0 = T0 * 1_000_000 + 123_456
    cpu, out = 0, []
    for i in range(n):
        cpu += (i * 7919) % 23 * 100_000_000
        out.append(Counters(t_ns=t0 + i * (S * 1_000_000 + 1_357), cpu_ns=cpu, mem=(i * 104_729) % 2**30,
                            mem_limit=2**31, net_rx=i * 1500, net_tx=i * 300, blk_read=i * 4096, blk_write=0))
    return out


def gpus_at(i: int) -> dict[int, GpuReading]:
    if i % 50 == 7:
        return {}  # a round without NVML readings
    util = 0.0 if (i // 40) % 2 else float(i % 100)
    return {g: GpuReading(index=g, utilization_percent=util, memory_used_bytes=i * 1000) for g in (0, 1)}


def sample(n: int, restart_at: frozenset[int] = frozenset()) -> tuple[TaskProfile, Doc | None, int]:
    """Run the sampler's steps over ``n`` readings, applying each write to a simulated stored document and
    checking it against the profile every step. ``restart_at``: readings before which the launcher restarts
    (it reloads the profile from the document and primes again). Returns the profile, the document and how
    many updates rewrote a level past the first."""
    profile, doc, prev, deep_writes = make_profile(), None, None, 0
    for i, cur in enumerate(readings(n)):
        if i in restart_at and doc is not None:
            profile, prev = TaskProfile.from_document(doc), None
        step = advance(profile, doc is not None, prev, cur, gpus_at(i), POLICY)
        profile, prev = step.profile, cur
        if step.write is not None:
            deep_writes += bool(step.write.added and step.write.added.deeper)
            doc = apply(doc, step.write.operation())
            assert doc == profile.to_document(), f"the stored document left the profile at reading {i}"
    return profile, doc, deep_writes


def test_two_thousand_samples_keep_the_document_equal_to_the_profile() -> None:
    profile, doc, deep_writes = sample(2001)
    assert doc is not None
    assert profile.totals.samples == 2000
    assert [len(doc[name]) for name in LEVEL_FIELDS] == [len(level) for level in profile.series.levels]
    assert len(doc["l2"]) > 0  # level 1 overflowed into level 2
    assert deep_writes == (2000 - 120 + 5) // 6  # one write in six rewrites a coarser level
    stored = TaskProfile.from_document(doc)
    assert [p.row() for p in stored.series.points()] == [p.row() for p in profile.series.points()]
    assert stored.idle == profile.idle and stored.totals == profile.totals


def test_a_launcher_restart_continues_from_the_stored_document() -> None:
    _, doc, _ = sample(1500, restart_at=frozenset({130, 700, 701, 1234}))
    assert doc is not None
    assert TaskProfile.from_document(doc).totals.samples == 1500 - 1 - 4  # each restart primes once


def test_every_level_overflowing_keeps_the_document_equal_to_the_profile() -> None:
    """Small levels, so all four overflow (the last merging its pairs) within a few hundred samples."""
    levels = (Level(capacity=5, factor=2), Level(capacity=4, factor=3), Level(capacity=3, factor=2),
              Level(capacity=4, factor=2))
    deepest = check_writes([point(i, cpu=i % 5 / 3, mem=i, gpu_util=None if i % 3 else 1.0) for i in range(1, 600)],
                           levels)
    assert deepest == 3


def check_writes(points: list[Usage], levels: tuple[Level, ...]) -> int:
    """Apply each point's write to the simulated document; it must equal the profile after every one."""
    profile, doc, deepest = make_profile(), None, 0
    for p in points:
        added = add(profile.series, p, levels)
        profile = profile.model_copy(update={"series": added.series, "last": p,
                                             "totals": profile.totals.plus(p, len(profile.gpus))})
        doc = apply(doc, ProfileWrite(profile=profile, new=doc is None, added=added).operation())
        assert doc == profile.to_document()
        deepest = max(deepest, added.deeper)
    return deepest


LEVEL_SETS = st.lists(st.integers(2, 6).flatmap(lambda cap: st.builds(Level, capacity=st.just(cap),
                                                                      factor=st.integers(2, cap))),
                      min_size=2, max_size=len(LEVEL_FIELDS)).map(tuple)  # one level is refused (tested above)


@settings(max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(LEVEL_SETS, st.lists(st.floats(0, 16, allow_nan=False), min_size=1, max_size=200))
def test_any_levels_and_samples_keep_the_document_equal(levels: tuple[Level, ...], cpus: list[float]) -> None:
    check_writes([point(i + 1, cpu=c, mem=round(c * 1000)) for i, c in enumerate(cpus)], levels)


def test_a_single_level_is_refused_as_its_in_place_merge_could_not_be_appended() -> None:
    with pytest.raises(ValueError, match="at least two levels"):
        check_writes([point(i) for i in range(1, 5)], (Level(capacity=2, factor=2),))


@pytest.mark.parametrize(("capacity", "factor"), [(2, 3), (1, 1), (4, 1)])
def test_a_level_whose_overflow_would_empty_it_is_refused(capacity: int, factor: int) -> None:
    with pytest.raises(ValueError):
        Level(capacity=capacity, factor=factor)

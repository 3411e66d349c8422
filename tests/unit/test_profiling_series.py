"""A task's usage points (shared.profiling.usage) and the bounded, downsampled series they join
(shared.profiling.series): tables for the merge and the overflows, and a property over any run of samples."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.profiling.series import LEVELS, MAX_POINTS, Level, Series, add
from shared.profiling.usage import Usage, merge

pytestmark = pytest.mark.unit

S = 10_000  # the default sampling interval, ms
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, ms


def point(t: int, span: int = S, cpu: float = 1.0, mem: int = 100, mem_peak: int | None = None,
          **fields: Any) -> Usage:
    """A point ending at ``t`` ms after T0, over ``span`` ms; other fields (net_rx, gpu_util, ...) by name."""
    return Usage(t_ms=T0 + t, span_ms=span, cpu=cpu, mem=mem, mem_peak=mem if mem_peak is None else mem_peak,
                 **fields)


def contiguous(n: int, span: int = S, **fields: Any) -> list[Usage]:
    """``n`` points at the sampling interval, each starting where the previous ended."""
    return [point((i + 1) * span, span, **fields) for i in range(n)]


def fill(points: list[Usage], levels: tuple[Level, ...] = LEVELS) -> tuple[Series, list[int]]:
    """The series after adding ``points`` in order, and each add's ``deeper``."""
    series, deeper = Series(), []
    for p in points:
        added = add(series, p, levels)
        series = added.series
        deeper.append(added.deeper)
    return series, deeper


# --- one point ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("usage", "row"), [
    (point(S), [T0 + S, S, 1.0, 100, 100, None, None, None, None, None, None]),
    (point(S, cpu=0.123456, mem=5, mem_peak=9, net_rx=1.005, net_tx=0.0, blk_read=2.5, blk_write=1e9,
           gpu_util=33.333, gpu_mem=2**34),
     [T0 + S, S, 0.1235, 5, 9, 1.0, 0.0, 2.5, 1e9, 33.33, 2**34]),
    (point(0, span=0, cpu=0.0, mem=0), [T0, 0, 0.0, 0, 0, None, None, None, None, None, None]),
])
def test_row_is_compact_and_reads_back(usage: Usage, row: list[float | int | None]) -> None:
    assert usage.row() == row
    assert Usage.from_row(row).row() == row


def test_row_keeps_not_measured_apart_from_zero() -> None:
    measured = Usage.from_row(point(S, net_rx=0.0, gpu_util=0.0, gpu_mem=0).row())
    unmeasured = Usage.from_row(point(S).row())
    assert (measured.net_rx, measured.gpu_util, measured.gpu_mem) == (0.0, 0.0, 0)
    assert (unmeasured.net_rx, unmeasured.gpu_util, unmeasured.gpu_mem) == (None, None, None)


def test_from_row_refuses_a_row_of_another_length() -> None:
    with pytest.raises(ValueError):
        Usage.from_row([T0, S, 1.0, 1, 1])


# --- merge ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("points", "expected"), [
    # equal spans: plain means, the highest peak, the span from the first start to the last end
    ([point(S, cpu=1.0, mem=100, mem_peak=150), point(2 * S, cpu=3.0, mem=300, mem_peak=120)],
     point(2 * S, span=2 * S, cpu=2.0, mem=200, mem_peak=150)),
    # spans weigh: 10 s at 1 core and 30 s at 3 cores is 2.5 cores over 40 s
    ([point(S, cpu=1.0, mem=0), point(4 * S, span=3 * S, cpu=3.0, mem=400)],
     point(4 * S, span=4 * S, cpu=2.5, mem=300, mem_peak=400)),
    # not measured is not zero: a value measured over part of the span is that part's mean
    ([point(S, net_rx=None, gpu_util=None, gpu_mem=None), point(2 * S, net_rx=50.0, gpu_util=80.0, gpu_mem=10),
      point(3 * S, net_rx=None, gpu_util=40.0, gpu_mem=20)],
     point(3 * S, span=3 * S, net_rx=50.0, gpu_util=60.0, gpu_mem=15)),
    # nothing measured stays not measured; zero measured stays zero
    ([point(S, blk_read=0.0), point(2 * S, blk_read=0.0)],
     point(2 * S, span=2 * S, blk_read=0.0)),
    # mem and gpu_mem stay integers (rounded means)
    ([point(S, mem=1, gpu_mem=1), point(2 * S, mem=2, gpu_mem=2)],
     point(2 * S, span=2 * S, mem=2, mem_peak=2, gpu_mem=2)),
    # points of no span: plain means (nothing to weigh by)
    ([point(S, span=0, cpu=1.0, net_tx=10.0), point(S, span=0, cpu=2.0, net_tx=20.0)],
     point(S, span=0, cpu=1.5, net_tx=15.0)),
    # a gap between points is covered by the merged point (the sampler's points are contiguous)
    ([point(S, cpu=1.0), point(3 * S, cpu=3.0)],
     point(3 * S, span=3 * S, cpu=2.0)),
])
def test_merge(points: list[Usage], expected: Usage) -> None:
    assert merge(points) == expected


def test_merge_of_one_point_is_that_point() -> None:
    p = point(S, cpu=0.5, gpu_util=12.0)
    assert merge([p]) is p


def test_merge_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one point"):
        merge([])


# --- the series: reading it -------------------------------------------------------------------

READ = Series(levels=((point(5 * S), point(6 * S)), (point(4 * S, span=2 * S),), (point(2 * S, span=2 * S),)))


@pytest.mark.parametrize(("since", "ends"), [
    (0, [2, 4, 5, 6]),
    (T0 + 2 * S, [4, 5, 6]),  # a point ending at since is not after it
    (T0 + 2 * S + 1, [4, 5, 6]),
    (T0 + 5 * S, [6]),
    (T0 + 6 * S, []),
])
def test_points_are_oldest_first_across_levels(since: int, ends: list[int]) -> None:
    assert [(p.t_ms - T0) // S for p in READ.points(since)] == ends


@pytest.mark.parametrize(("n", "ends"), [(0, []), (-1, []), (1, [6]), (3, [4, 5, 6]), (4, [2, 4, 5, 6]),
                                         (10, [2, 4, 5, 6])])
def test_last(n: int, ends: list[int]) -> None:
    assert [(p.t_ms - T0) // S for p in READ.last(n)] == ends


def test_an_empty_series() -> None:
    assert (Series().points(), Series().last(5), Series().size) == ([], [], 0)


# --- the series: adding -----------------------------------------------------------------------


def test_the_default_levels() -> None:
    assert [(lv.capacity, lv.factor) for lv in LEVELS] == [(120, 6), (120, 10), (144, 6), (168, 2)]
    assert MAX_POINTS == 552


SMALL = (Level(capacity=3, factor=2), Level(capacity=2, factor=2), Level(capacity=2, factor=2))


@pytest.mark.parametrize(("n", "sizes", "deeper"), [
    # (points added, each level's size after, the last add's deeper)
    (1, [1, 0, 0], 0),
    (3, [3, 0, 0], 0),
    (4, [2, 1, 0], 1),  # level 0 overflows: its oldest 2 make one point of level 1
    (5, [3, 1, 0], 0),
    (6, [2, 2, 0], 1),
    (8, [2, 1, 1], 2),  # level 1 overflows in turn
    (12, [2, 1, 2], 2),
    (16, [2, 1, 2], 2),  # the last level overflows: its 3 points merge in pairs, 2 remain
])
def test_add_overflows_level_by_level(n: int, sizes: list[int], deeper: int) -> None:
    series, deepers = fill(contiguous(n), SMALL)
    assert [len(level) for level in series.levels] == sizes
    assert deepers[-1] == deeper


def test_the_last_level_merges_in_pairs_and_keeps_the_start() -> None:
    series, deepers = fill(contiguous(16), SMALL)
    assert deepers[-1] == 2
    oldest, second = series.levels[2]
    assert (oldest.start_ms, oldest.span_ms) == (T0, 8 * S)  # pair of (0-4] and (4-8]: the start is kept
    assert (second.start_ms, second.span_ms) == (T0 + 8 * S, 4 * S)


@pytest.mark.parametrize(("n", "deeper_at"), [
    (120, {}),
    (121, {121: 1}),  # 121st sample: 6 oldest to level 1
    (127, {121: 1, 127: 1}),
    (841, {121 + 6 * k: 1 for k in range(120)} | {841: 2}),  # level 1's 121st point: 10 of them to level 2
])
def test_default_levels_overflow_when_documented(n: int, deeper_at: dict[int, int]) -> None:
    _, deepers = fill(contiguous(n))
    assert {i + 1: d for i, d in enumerate(deepers) if d} == deeper_at


def test_a_week_at_ten_seconds_keeps_the_documented_resolutions() -> None:
    """20 minutes at 10 s, 2 hours at a minute, a day at 10 minutes, the rest at an hour, then coarser."""
    series, deepers = fill(contiguous(75_000))  # past 10 days: the last level has merged its pairs
    assert 3 in deepers
    assert series.size <= MAX_POINTS
    assert [len(level) for level in series.levels[:3]] == [120, 120, 144]  # full
    assert [{p.span_ms for p in level} for level in series.levels[:3]] == [{S}, {6 * S}, {60 * S}]
    assert {p.span_ms for p in series.levels[3]} <= {360 * S, 720 * S}
    assert series.points()[0].start_ms == T0
    assert series.points()[-1].t_ms == T0 + 75_000 * S


# --- the property -----------------------------------------------------------------------------

# factor <= capacity, as in any sensible set: with a larger factor an overflow would empty a level (the
# newest sample would leave level 0 at once)
LEVEL_SETS = st.lists(st.integers(2, 6).flatmap(lambda cap: st.builds(Level, capacity=st.just(cap),
                                                                      factor=st.integers(2, cap))),
                      min_size=2, max_size=4).map(tuple)  # add() needs two levels at least


@st.composite
def samples(draw: st.DrawFn) -> list[Usage]:
    """Contiguous points (each starts where the previous ended), as the sampler makes them; GPU either
    measured throughout or never."""
    spans = draw(st.lists(st.integers(1, 60_000), min_size=1, max_size=250))
    gpu = draw(st.booleans())
    out, t = [], T0
    for span in spans:
        t += span
        out.append(Usage(
            t_ms=t, span_ms=span, cpu=draw(st.floats(0, 64, allow_nan=False)), mem=(mem := draw(st.integers(0, 2**36))),
            mem_peak=mem + draw(st.integers(0, 2**30)),
            gpu_util=draw(st.floats(0, 100, allow_nan=False)) if gpu else None))
    return out


def weighted_mean(points: list[Usage], value: str) -> float:
    total: float = sum(getattr(p, value) * p.span_ms for p in points)
    return total / sum(p.span_ms for p in points)


PROPERTY = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def padded(series: Series, n: int) -> list[tuple[Usage, ...]]:
    return list(series.levels) + [()] * (n - len(series.levels))


@PROPERTY
@given(samples(), st.one_of(st.just(LEVELS), LEVEL_SETS))
def test_deeper_names_every_level_that_changed(inputs: list[Usage], levels: tuple[Level, ...]) -> None:
    """What a store relies on: level 0 only grew at its end (or lost its oldest points), levels 1..deeper
    may have changed, the others did not."""
    series = Series()
    for p in inputs:
        added = add(series, p, levels)
        before, after = padded(series, len(levels)), padded(added.series, len(levels))
        grown = (*before[0], p)
        assert after[0] == grown[len(grown) - len(after[0]):]
        assert 0 <= added.deeper < len(levels)
        assert after[added.deeper + 1:] == before[added.deeper + 1:]
        if added.deeper:
            assert after[added.deeper] != before[added.deeper]
        series = added.series


@PROPERTY
@given(samples(), st.one_of(st.just(LEVELS), LEVEL_SETS))
def test_any_run_of_samples(inputs: list[Usage], levels: tuple[Level, ...]) -> None:
    series, _ = fill(inputs, levels)
    out = series.points()
    # bounded, level by level
    assert series.size <= sum(level.capacity for level in levels)
    assert all(len(lv) <= level.capacity for lv, level in zip(series.levels, levels, strict=True))
    if levels is LEVELS:
        assert series.size <= MAX_POINTS
    # in time order, without overlap, covering exactly the inputs' time
    assert all(b.start_ms >= a.t_ms for a, b in itertools.pairwise(out))
    assert sum(p.span_ms for p in out) == inputs[-1].t_ms - inputs[0].start_ms
    assert (out[0].start_ms, out[-1].t_ms) == (inputs[0].start_ms, inputs[-1].t_ms)
    assert series.last(1) == [inputs[-1]]
    # merging keeps span-weighted sums (means over the whole run) and the peak
    assert weighted_mean(out, "cpu") == pytest.approx(weighted_mean(inputs, "cpu"), rel=1e-9, abs=1e-9)
    # mem is rounded to whole bytes at each merge: half a byte per merge a point went through
    assert weighted_mean(out, "mem") == pytest.approx(weighted_mean(inputs, "mem"),
                                                      abs=len(levels) + len(inputs).bit_length())
    assert max(p.mem_peak for p in out) == max(p.mem_peak for p in inputs)
    if inputs[0].gpu_util is None:
        assert all(p.gpu_util is None for p in out)
    else:
        assert weighted_mean(out, "gpu_util") == pytest.approx(weighted_mean(inputs, "gpu_util"), rel=1e-9, abs=1e-9)

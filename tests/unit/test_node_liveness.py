"""Which silent nodes are lost (shared.scheduling.nodeliveness): the database's outage is not the nodes' death."""

from __future__ import annotations

import pytest

from shared.scheduling.nodeliveness import DatabaseWatch, Heartbeat, judge_nodes

pytestmark = pytest.mark.unit

S = 1000
TIMEOUT = 40 * S
PERIOD = 10 * S
NOW = 10_000 * S


def beats(*ages_s: float, lost: tuple[int, ...] = ()) -> list[Heartbeat]:
    """Nodes n0, n1, ... last heard from ``ages_s`` seconds before NOW."""
    return [Heartbeat(node_id=f"n{i}", heartbeat_ms=int(NOW - age * S), lost=i in lost) for i, age in enumerate(ages_s)]


def up_for(seconds: float) -> DatabaseWatch:
    return DatabaseWatch(reachable_since_ms=int(NOW - seconds * S), last_ok_ms=NOW)


# --- the scheduler's view of the database --------------------------------------------------------------


def test_first_answer_starts_a_stretch() -> None:
    watch = DatabaseWatch().observed(ok=True, now_ms=NOW, period_ms=PERIOD)
    assert watch.reachable_since_ms == NOW
    assert watch.reachable_for_ms(NOW + 5 * S) == 5 * S


def test_answers_every_period_keep_the_stretch() -> None:
    watch = DatabaseWatch()
    for k in range(10):
        watch = watch.observed(ok=True, now_ms=NOW + k * PERIOD, period_ms=PERIOD)
    assert watch.reachable_since_ms == NOW
    assert watch.reachable_for_ms(NOW + 9 * PERIOD) == 90 * S


def test_a_failed_round_ends_the_stretch_and_the_next_answer_starts_anew() -> None:
    watch = DatabaseWatch().observed(ok=True, now_ms=NOW, period_ms=PERIOD)
    watch = watch.observed(ok=False, now_ms=NOW + PERIOD, period_ms=PERIOD)
    assert watch.reachable_since_ms is None
    assert watch.reachable_for_ms(NOW + PERIOD) == 0
    watch = watch.observed(ok=True, now_ms=NOW + 50 * S, period_ms=PERIOD)
    assert watch.reachable_since_ms == NOW + 50 * S


@pytest.mark.parametrize(("gap_s", "broken"), [(10, False), (30, False), (31, True), (120, True)])
def test_a_long_gap_between_answers_is_a_break(gap_s: int, broken: bool) -> None:
    """A frozen scheduler (or one whose rounds hung) saw nothing meanwhile: its stretch starts again."""
    watch = DatabaseWatch().observed(ok=True, now_ms=NOW, period_ms=PERIOD)
    watch = watch.observed(ok=True, now_ms=NOW + gap_s * S, period_ms=PERIOD)
    assert watch.reachable_since_ms == (NOW + gap_s * S if broken else NOW)


# --- the verdict ---------------------------------------------------------------------------------------


def test_nodes_heard_lately_are_fine() -> None:
    verdict = judge_nodes(beats(1, 39, 40), now_ms=NOW, timeout_ms=TIMEOUT, watch=up_for(1000))
    assert verdict.lost == () and verdict.silent == () and verdict.held_back is None


def test_one_silent_node_of_three_is_lost() -> None:
    verdict = judge_nodes(beats(1, 41, 2), now_ms=NOW, timeout_ms=TIMEOUT, watch=up_for(1000))
    assert verdict.lost == ("n1",)
    assert verdict.held_back is None


def test_one_silent_node_of_two_is_lost() -> None:
    """A two-node cluster still finds a dead machine (1 of 2 is under the disruption fraction)."""
    verdict = judge_nodes(beats(50, 3), now_ms=NOW, timeout_ms=TIMEOUT, watch=up_for(1000))
    assert verdict.lost == ("n0",)


def test_a_single_node_cluster_finds_its_node_lost() -> None:
    verdict = judge_nodes(beats(50), now_ms=NOW, timeout_ms=TIMEOUT, watch=up_for(1000))
    assert verdict.lost == ("n0",)


@pytest.mark.parametrize("reachable_s", [0, 10, 39.9])
def test_nothing_is_lost_until_the_database_answered_for_a_whole_timeout(reachable_s: float) -> None:
    """The outage of the issue: the database back for less than the timeout, every heartbeat old."""
    verdict = judge_nodes(beats(50, 50), now_ms=NOW, timeout_ms=TIMEOUT, watch=up_for(reachable_s))
    assert verdict.lost == ()
    assert verdict.silent == ("n0", "n1")
    assert verdict.held_back is not None and "whole timeout" in verdict.held_back


def test_a_scheduler_that_never_reached_the_database_judges_nothing() -> None:
    verdict = judge_nodes(beats(500), now_ms=NOW, timeout_ms=TIMEOUT, watch=DatabaseWatch())
    assert verdict.lost == ()
    assert verdict.held_back is not None


def test_after_a_whole_timeout_of_database_a_still_silent_node_is_lost() -> None:
    verdict = judge_nodes(beats(90, 5, 5), now_ms=NOW, timeout_ms=TIMEOUT, watch=up_for(40))
    assert verdict.lost == ("n0",)


@pytest.mark.parametrize(("ages", "lost"), [
    ((50, 50), ()),                    # 2 of 2: the control plane, not two machines
    ((50, 50, 1), ()),                 # 2 of 3 (0.67)
    ((50, 50, 1, 1), ("n0", "n1")),    # 2 of 4 (0.5): under the fraction, judged one by one
    ((50, 50, 50, 1, 1), ()),          # 3 of 5 (0.6)
    ((50, 1, 1, 1, 1), ("n0",)),
])
def test_many_nodes_silent_together_are_spared(ages: tuple[int, ...], lost: tuple[str, ...]) -> None:
    verdict = judge_nodes(beats(*ages), now_ms=NOW, timeout_ms=TIMEOUT, watch=up_for(1000))
    assert verdict.lost == lost
    assert (verdict.held_back is None) == bool(lost)
    if not lost:
        assert verdict.held_back is not None and "went silent together" in verdict.held_back


def test_nodes_already_lost_count_neither_as_silent_nor_as_live() -> None:
    """A machine gone for days does not make the next dead one look like a disruption (1 of 1 live)."""
    verdict = judge_nodes(beats(99_999, 50, lost=(0,)), now_ms=NOW, timeout_ms=TIMEOUT, watch=up_for(1000))
    assert verdict.lost == ("n1",)
    assert verdict.silent == ("n1",)


def test_same_view_same_verdict() -> None:
    nodes = beats(50, 3, 70, 1, 2)
    first = judge_nodes(nodes, now_ms=NOW, timeout_ms=TIMEOUT, watch=up_for(100))
    assert judge_nodes(list(reversed(nodes)), now_ms=NOW, timeout_ms=TIMEOUT, watch=up_for(100)).lost == tuple(
        sorted(first.lost, reverse=True))
    assert first.lost == ("n0", "n2")

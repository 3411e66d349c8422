"""The usage rollups' pure core: held intervals cut at UTC midnights, every attempt counted for what it held
(retries, preemption, re-runs in place), use from the profiles, the report's range, access and CSV."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from shared.profiling.totals import TaskTotals
from shared.records import AttemptRecord, JobRecord, JobState, TaskRecord, TaskState
from shared.usage.counting import Amounts, job_days, merged
from shared.usage.days import DAY_MS, DayRange, DaySpan, RangeProblem, day_of, day_range, split_days
from shared.usage.report import Asked, Asker, Refusal, RowFilter, csv_text, report_row, row_filters
from tests.unit.factories import make_config, make_job, role_dict

pytestmark = pytest.mark.unit

H = 3_600_000
MIDNIGHT = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _approx(a: Amounts) -> dict[str, Any]:
    return {k: pytest.approx(v) for k, v in a.model_dump().items()}


def ran(role: str = "main", index: int = 0, *, start: int | None, end: int | None, gpus: int = 0,
        state: TaskState = TaskState.SUCCEEDED, **more: Any) -> TaskRecord:
    return TaskRecord(role=role, index=index, state=state, node_id="n1", gpus=tuple(range(gpus)), started_ms=start,
                      completed_ms=end, **more)


def ended(tasks: list[TaskRecord], *, completed: int, cpus: int = 4, gpus: int = 2, number: int = 1,
          attempt: int = 0, state: JobState = JobState.SUCCEEDED, vc: str = "default") -> JobRecord:
    config = make_config(role_dict("main", taskNumber=number, cpuNumber=cpus, gpuNumber=gpus), virtualCluster=vc)
    job = make_job(config, user="alice", tasks=tasks, state=state, attempt=attempt)
    return job.model_copy(update={"completed_ms": completed})


def by_day(job: JobRecord, archived: tuple[AttemptRecord, ...] = (),
           runs: dict[tuple[int, str, int, int], TaskTotals] | None = None) -> dict[str, Amounts]:
    return {r.day: r.amounts for r in job_days(job, archived, runs or {})}


# --- days ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("start", "end", "spans"), [
    (MIDNIGHT + H, MIDNIGHT + 3 * H, [("2026-01-01", 2 * H)]),
    (MIDNIGHT - H, MIDNIGHT + 2 * H, [("2025-12-31", H), ("2026-01-01", 2 * H)]),  # across midnight
    (MIDNIGHT - H, MIDNIGHT + DAY_MS + H, [("2025-12-31", H), ("2026-01-01", DAY_MS), ("2026-01-02", H)]),
    (MIDNIGHT, MIDNIGHT + DAY_MS, [("2026-01-01", DAY_MS)]),  # a whole day, and not a moment of the next
    (MIDNIGHT + H, MIDNIGHT + H, []),
    (MIDNIGHT + H, MIDNIGHT, []),
])
def test_an_interval_is_cut_at_each_utc_midnight(start: int, end: int, spans: list[tuple[str, int]]) -> None:
    assert split_days(start, end) == tuple(DaySpan(day=d, ms=ms) for d, ms in spans)
    assert sum(s.ms for s in split_days(start, end)) == max(0, end - start)


def test_day_of_is_the_utc_day() -> None:
    assert (day_of(MIDNIGHT - 1), day_of(MIDNIGHT), day_of(0)) == ("2025-12-31", "2026-01-01", "1970-01-01")


TODAY = dt.date(2026, 3, 10)
WIDE = "\uff12\uff10\uff12\uff16"  # 2026 in fullwidth digits, which date.fromisoformat would take


@pytest.mark.parametrize(("first", "last", "want"), [
    (None, None, ("2026-02-09", "2026-03-10")),  # the 30 days to today
    ("2026-03-01", None, ("2026-03-01", "2026-03-10")),
    (None, "2026-01-31", ("2026-01-02", "2026-01-31")),
    ("2026-01-01", "2026-04-02", ("2026-01-01", "2026-04-02")),  # 92 days: the most
    ("2026-03-01", "2026-03-01", ("2026-03-01", "2026-03-01")),
])
def test_a_report_covers_the_days_asked_for(first: str | None, last: str | None, want: tuple[str, str]) -> None:
    got = day_range(first, last, TODAY)
    assert isinstance(got, DayRange) and got.bounds() == want


@pytest.mark.parametrize(("first", "last", "message"), [
    ("2026-13-01", None, "from: must be a UTC day as YYYY-MM-DD, not '2026-13-01'"),
    ("yesterday", None, "from: must be a UTC day as YYYY-MM-DD, not 'yesterday'"),
    (None, "2026-3-1", "to: must be a UTC day as YYYY-MM-DD, not '2026-3-1'"),
    (None, f"{WIDE}-03-01", f"to: must be a UTC day as YYYY-MM-DD, not '{WIDE}-03-01'"),
    ("2026-03-05", "2026-03-01", "from (2026-03-05) is after to (2026-03-01)"),
    ("2026-01-01", "2026-04-03", "from 2026-01-01 to 2026-04-03 is 93 days; a report covers at most 92: ask for "
                                 "several"),
])
def test_a_wrong_range_is_refused_in_one_sentence(first: str | None, last: str | None, message: str) -> None:
    assert day_range(first, last, TODAY) == RangeProblem(message=message)


# --- what a job adds ----------------------------------------------------------------------------------


def test_a_job_spanning_midnight_is_split_between_its_days() -> None:
    job = ended([ran(start=MIDNIGHT - 2 * H, end=MIDNIGHT + H, gpus=2)], completed=MIDNIGHT + H)
    days = by_day(job)
    assert list(days) == ["2025-12-31", "2026-01-01"]
    assert _approx(days["2025-12-31"]) == _approx(Amounts(gpu_held_s=2 * 7200, cpu_held_s=4 * 7200))
    assert _approx(days["2026-01-01"]) == _approx(Amounts(gpu_held_s=2 * 3600, cpu_held_s=4 * 3600, jobs=1,
                                                          attempts=1))


def test_each_task_counts_its_own_time_and_one_that_never_started_nothing() -> None:
    job = ended([ran(index=0, start=MIDNIGHT, end=MIDNIGHT + H, gpus=1),
                 ran(index=1, start=MIDNIGHT, end=MIDNIGHT + 2 * H, gpus=1),
                 ran(index=2, start=None, end=MIDNIGHT + H, state=TaskState.STOPPED)],
                completed=MIDNIGHT + 2 * H, gpus=1, number=3)
    [(day, a)] = by_day(job).items()
    assert (day, a.gpu_held_s, a.cpu_held_s, a.jobs) == ("2026-01-01", 3 * 3600, 4 * 3 * 3600, 1)


def test_a_task_still_stopping_when_its_job_ended_is_counted_to_the_jobs_end() -> None:
    job = ended([ran(start=MIDNIGHT, end=None, gpus=2, state=TaskState.RUNNING)], completed=MIDNIGHT + H,
                state=JobState.STOPPED)
    assert by_day(job)["2026-01-01"].gpu_held_s == 2 * 3600


def test_every_attempt_of_a_retried_job_counts_for_the_time_it_held() -> None:
    first = AttemptRecord(attempt=0, tasks=(ran(start=MIDNIGHT - 3 * H, end=MIDNIGHT - 2 * H, gpus=2,
                                                state=TaskState.FAILED, exit_code=1),),
                          completed_ms=MIDNIGHT - 2 * H + 500, exit_code=1)
    second = AttemptRecord(attempt=1, tasks=(ran(start=MIDNIGHT - H, end=MIDNIGHT + H, gpus=2,
                                                 state=TaskState.FAILED, exit_code=1),),
                           completed_ms=MIDNIGHT + H + 500, exit_code=1)
    job = ended([ran(start=MIDNIGHT + 2 * H, end=MIDNIGHT + 3 * H, gpus=2)], completed=MIDNIGHT + 3 * H, attempt=2)
    days = by_day(job, (first, second))
    assert (days["2025-12-31"].gpu_held_s, days["2025-12-31"].attempts) == (2 * 2 * 3600, 1)
    assert (days["2026-01-01"].gpu_held_s, days["2026-01-01"].attempts, days["2026-01-01"].jobs) == (2 * 2 * 3600, 2, 1)


def test_a_preempted_attempt_counts_until_its_containers_were_gone() -> None:
    """Preemption ends the attempt as -1004 and its tasks when their containers exit (SIGTERM, then SIGKILL
    after the grace): the archived attempt holds them until then, and the next attempt counts its own."""
    preempted = AttemptRecord(attempt=0, tasks=(
        ran(index=0, start=MIDNIGHT, end=MIDNIGHT + H + 30_000, gpus=4, state=TaskState.STOPPED, exit_code=137),
        ran(index=1, start=MIDNIGHT, end=MIDNIGHT + H + 2_000, gpus=4, state=TaskState.STOPPED, exit_code=143)),
        completed_ms=MIDNIGHT + H + 31_000, exit_code=-1004)
    job = ended([ran(index=i, start=MIDNIGHT + 2 * H, end=MIDNIGHT + 3 * H, gpus=4) for i in range(2)],
                completed=MIDNIGHT + 3 * H, attempt=1, gpus=4, number=2)
    [(_, a)] = by_day(job, (preempted,)).items()
    assert a.gpu_held_s == pytest.approx(4 * (3600 + 30 + 3600 + 2) + 2 * 4 * 3600)
    assert (a.attempts, a.jobs) == (2, 1)


def test_gpu_and_cpu_use_come_from_the_profile_spread_over_the_days_held() -> None:
    job = ended([ran(start=MIDNIGHT - H, end=MIDNIGHT + 3 * H, gpus=2)], completed=MIDNIGHT + 3 * H)
    held = 2 * 4 * 3600.0
    totals = TaskTotals(samples=1440, first_ms=MIDNIGHT - H, last_ms=MIDNIGHT + 3 * H, cpu_seconds=1.5 * 4 * 3600,
                        gpu_held_seconds=held, gpu_measured_seconds=held * 0.9, gpu_used_seconds=held * 0.9 * 0.5)
    days = by_day(job, runs={(0, "main", 0, 0): totals})
    before, after = days["2025-12-31"], days["2026-01-01"]
    assert before.gpu_measured_s == pytest.approx(0.9 * 2 * 3600)  # a quarter of the time: a quarter of the use
    assert before.gpu_used_s == pytest.approx(0.45 * 2 * 3600)
    assert after.gpu_used_s == pytest.approx(0.45 * 2 * 3 * 3600)
    assert before.cpu_used_s + after.cpu_used_s == pytest.approx(1.5 * 4 * 3600)
    row = report_row("2026-01-01", "default", "alice", after)
    assert (row.gpu_hours_held, row.gpu_utilization) == (6.0, 50.0)


def test_without_a_gpu_reading_nothing_is_measured_and_utilisation_is_unknown() -> None:
    job = ended([ran(start=MIDNIGHT, end=MIDNIGHT + H, gpus=2)], completed=MIDNIGHT + H)
    totals = TaskTotals(samples=360, first_ms=MIDNIGHT, last_ms=MIDNIGHT + H, cpu_seconds=3600.0,
                        gpu_held_seconds=7200.0)
    a = by_day(job, runs={(0, "main", 0, 0): totals})["2026-01-01"]
    assert (a.gpu_held_s, a.gpu_measured_s, a.gpu_used_s, a.cpu_used_s) == (7200.0, 0.0, 0.0, 3600.0)
    assert report_row("2026-01-01", "default", "alice", a).gpu_utilization is None


def test_use_never_exceeds_what_was_held_that_day() -> None:
    job = ended([ran(start=MIDNIGHT, end=MIDNIGHT + H, gpus=1)], completed=MIDNIGHT + H)
    totals = TaskTotals(samples=2, first_ms=MIDNIGHT - H, last_ms=MIDNIGHT + H, gpu_held_seconds=7200.0,
                        gpu_measured_seconds=7200.0, gpu_used_seconds=7200.0)
    a = by_day(job, runs={(0, "main", 0, 0): totals})["2026-01-01"]
    assert a.gpu_measured_s == a.gpu_used_s == a.gpu_held_s == 3600.0


def test_rows_of_many_jobs_merge_into_one_increment_per_document() -> None:
    a = ended([ran(start=MIDNIGHT, end=MIDNIGHT + H, gpus=1)], completed=MIDNIGHT + H, gpus=1)
    b = ended([ran(start=MIDNIGHT + H, end=MIDNIGHT + 2 * H, gpus=1)], completed=MIDNIGHT + 2 * H, gpus=1, vc="v")
    rows = merged([*job_days(a, (), {}), *job_days(a, (), {}), *job_days(b, (), {})])
    assert {k: (x.gpu_held_s, x.jobs) for k, x in rows.items()} == {
        ("2026-01-01", "default", "alice"): (7200.0, 2), ("2026-01-01", "v", "alice"): (3600.0, 1)}


# --- who sees what --------------------------------------------------------------------------------------

ADMIN = Asker(user="root", admin=True)
BOB = Asker(user="bob", admin=False, vcs=("default", "vision"))


@pytest.mark.parametrize(("asker", "asked", "want"), [
    (ADMIN, Asked(), (RowFilter(),)),
    (ADMIN, Asked(vc="x", user="u"), (RowFilter(user="u", vcs=("x",)),)),
    (ADMIN, Asked(by="vc"), (RowFilter(),)),
    (BOB, Asked(), (RowFilter(user="bob"), RowFilter(vcs=("default", "vision")))),
    (BOB, Asked(user="bob"), (RowFilter(user="bob"),)),
    (BOB, Asked(user="carol"), (RowFilter(user="carol", vcs=("default", "vision")),)),
    (BOB, Asked(vc="vision"), (RowFilter(vcs=("vision",)),)),
    (BOB, Asked(vc="secret", user="bob"), (RowFilter(user="bob", vcs=("secret",)),)),  # their own use, kept
    (BOB, Asked(by="vc"), (RowFilter(vcs=("default", "vision")),)),
    (Asker(user="eve", admin=False), Asked(by="vc"), (RowFilter(vcs=()),)),
])
def test_a_user_sees_their_own_rows_and_their_vcs_an_admin_everyones(
        asker: Asker, asked: Asked, want: tuple[RowFilter, ...]) -> None:
    assert row_filters(asker, asked) == want


@pytest.mark.parametrize(("asked", "status"), [
    (Asked(vc="secret"), 403),
    (Asked(vc="secret", user="carol"), 403),
    (Asked(by="vc", vc="secret"), 403),
    (Asked(by="vc", user="bob"), 400),
])
def test_rows_beyond_what_a_user_may_see_are_refused(asked: Asked, status: int) -> None:
    refused = row_filters(BOB, asked)
    assert isinstance(refused, Refusal) and refused.status == status


def test_csv_has_a_header_and_an_empty_cell_for_what_is_unknown() -> None:
    rows = [report_row("2026-01-01", "default", "alice", Amounts(gpu_held_s=5400, cpu_held_s=3600, jobs=2,
                                                                 attempts=3)),
            report_row("2026-01-01", "vision", None, Amounts(gpu_held_s=3600, gpu_measured_s=3600,
                                                             gpu_used_s=900))]
    assert csv_text(rows).splitlines() == [
        "day,vc,user,gpu_hours_held,gpu_hours_used,gpu_hours_measured,gpu_utilization,cpu_core_hours_held,"
        "cpu_core_hours_used,jobs,attempts",
        "2026-01-01,default,alice,1.5,0.0,0.0,,1.0,0.0,2,3",
        "2026-01-01,vision,,1.0,0.25,1.0,25.0,0.0,0.0,0,0"]


def test_earlier_runs_of_a_task_rerun_in_place_count_over_their_profiles_span() -> None:
    """taskRetryCount re-runs a task in place: its record keeps its current run's times only (run 1 here),
    the first run is counted from its profile's sampled span."""
    job = ended([ran(start=MIDNIGHT + 2 * H, end=MIDNIGHT + 3 * H, gpus=2, retries=1)], completed=MIDNIGHT + 3 * H)
    first_run = TaskTotals(samples=360, first_ms=MIDNIGHT, last_ms=MIDNIGHT + H, cpu_seconds=1800.0,
                           gpu_held_seconds=7200.0)
    a = by_day(job, runs={(0, "main", 0, 0): first_run})["2026-01-01"]
    assert (a.gpu_held_s, a.cpu_used_s) == (2 * 2 * 3600.0, 1800.0)

"""The retry policy of frameworklauncher as OpenPAI v0.14 set it from retryCount, as tables over
(retryCount, exit code, counters so far) -> the job's next step.

retryCount N >= 0 and -1 are its "fancy" policy: transient failures retried (as platform or resource
retries, capped by paiq's platform cap), permanent ones final, the rest user retries (at most N, or
without limit for -1), success final. retryCount -2 is its normal policy with unlimited retries: every
completion, success included, starts a new attempt until a user stops the job.
"""

from __future__ import annotations

import pytest

from shared.events import JobCompleted, JobRetrying
from shared.lifecycle import transitions as lifecycle
from shared.lifecycle.exitspec import load_table
from shared.lifecycle.transitions import RetryPolicy
from shared.records import JobRecord, JobState, RetryCounts, SubState, TaskState
from tests.unit.test_lifecycle import NOW, exited, one_task_job, placed, started

pytestmark = pytest.mark.unit

POLICY = RetryPolicy(table=load_table(), max_platform_retries=3, backoff_base_ms=1000, backoff_max_ms=60_000)


def running(retry_count: int, attempt: int = 0, at: int = NOW, **counts: int) -> JobRecord:
    """A one-task job of ``retryCount`` whose attempt ``attempt`` runs since ``at``, retried ``counts`` so far."""
    job = one_task_job(retryCount=retry_count).model_copy(update={
        "attempt": attempt, "retry_counts": RetryCounts(**counts), "retries": sum(counts.values())})
    change = lifecycle.task_started(job, started(attempt=attempt), at)
    assert change is not None
    return change[0]


def ended(job: JobRecord, code: int, at: int) -> tuple[JobRecord, list[object]]:
    change = lifecycle.task_exited(job, exited(code, attempt=job.attempt), at, POLICY)
    assert change is not None
    return change[0], list(change[1])


# (retryCount, exit code, counters before) -> the counter the retry counts on, or the job's final state
DECISIONS: list[tuple[str, int, int, dict[str, int], str | JobState]] = [
    # retryCount N: fancy, bounded
    ("N: success ends", 2, 0, {}, JobState.SUCCEEDED),
    ("N: user failure retried", 2, 3, {}, "user"),
    ("N: user failure, retryCount used up", 2, 3, {"user": 2}, JobState.FAILED),
    ("N: platform failure retried", 2, -1001, {"user": 2}, "platform"),
    ("N: platform cap reached", 2, -1001, {"platform": 3}, JobState.FAILED),
    ("N: resource failure backoff-retried", 2, 251, {}, "resource"),
    ("N: permanent failure ends", 2, 254, {}, JobState.FAILED),
    ("0: user failure ends", 0, 3, {}, JobState.FAILED),
    ("0: platform failure retried", 0, 137, {}, "platform"),
    # retryCount -1: fancy, user retries without limit
    ("-1: success ends", -1, 0, {}, JobState.SUCCEEDED),
    ("-1: user failure retried", -1, 3, {}, "user"),
    ("-1: user failure retried past any count", -1, 3, {"user": 100_000}, "user"),
    ("-1: SIGABRT retried to max, which is none", -1, 134, {"user": 5000}, "user"),
    ("-1: unknown negative code retried", -1, -9999, {}, "user"),
    ("-1: permanent (image) ends", -1, 254, {}, JobState.FAILED),
    ("-1: permanent (OOM) ends", -1, -1200, {}, JobState.FAILED),
    ("-1: permanent (SIGSEGV) ends", -1, 139, {"user": 7}, JobState.FAILED),
    ("-1: platform failure retried", -1, -1001, {}, "platform"),
    ("-1: platform cap still holds", -1, -1001, {"platform": 3}, JobState.FAILED),
    ("-1: resource cap still holds", -1, 251, {"resource": 3}, JobState.FAILED),
    # retryCount -2: not fancy, every completion starts a new attempt
    ("-2: success starts again", -2, 0, {}, "user"),
    ("-2: success starts again, forever", -2, 0, {"user": 1_000_000}, "user"),
    ("-2: user failure starts again", -2, 3, {}, "user"),
    ("-2: permanent failure starts again", -2, 254, {}, "user"),
    ("-2: platform failure past the cap starts again", -2, -1001, {"platform": 3}, "platform"),
    ("-2: resource failure starts again", -2, 251, {"resource": 50}, "resource"),
]


@pytest.mark.parametrize(("retry_count", "code", "counts", "expect"), [d[1:] for d in DECISIONS],
                         ids=[d[0] for d in DECISIONS])
def test_what_an_ended_attempt_leads_to(retry_count: int, code: int, counts: dict[str, int],
                                        expect: str | JobState) -> None:
    job, events = ended(running(retry_count, **counts), code, NOW + 100)
    if isinstance(expect, JobState):
        assert (job.state, job.sub_state, job.exit_code) == (expect, SubState.COMPLETED, code)
        assert job.retry_counts == RetryCounts(**counts), "an ending counts no retry"
        assert isinstance(events[0], JobCompleted) and events[0].data.state == expect
        return
    assert (job.state, job.sub_state, job.exit_code) == (JobState.WAITING, SubState.RETRY_PENDING, code)
    assert getattr(job.retry_counts, expect) == counts.get(expect, 0) + 1
    assert job.retries == sum(counts.values()) + 1 == job.retry_counts.total
    [event] = events
    assert isinstance(event, JobRetrying) and event.data.counter == expect


REASONS: list[tuple[int, int, str]] = [
    (2, 3, "attempt 0 failed with exit 3 (UserFailure: The command exited 3.); retry 1, 1 of 2 allowed, in 1s"),
    (0, -1001, "retry 1, not counted against retryCount (platform retry 1), in 1s"),
    (-1, 3, "attempt 0 failed with exit 3 (UserFailure: The command exited 3.); "
            "retry 1, user retry 1, unlimited (retryCount -1), in 1s"),
    (-1, 251, "retry 1, not counted against retryCount (resource retry 1), in 4s"),
    (-2, 0, "attempt 0 succeeded; retry 1, user retry 1; started again after every exit until stopped "
            "(retryCount -2), in 1s"),
    (-2, 3, "attempt 0 failed with exit 3 (UserFailure: The command exited 3.); retry 1, user retry 1; "
            "started again after every exit until stopped (retryCount -2), in 1s"),
    (-2, -1001, "retry 1, platform retry 1; started again after every exit until stopped (retryCount -2), in 1s"),
]


@pytest.mark.parametrize(("retry_count", "code", "words"), REASONS)
def test_a_retry_says_the_policy_in_words(retry_count: int, code: int, words: str) -> None:
    job, _ = ended(running(retry_count), code, NOW + 100)
    assert words in job.reason, job.reason
    assert "of -1" not in job.reason and "of -2" not in job.reason


def test_retry_count_minus_2_runs_attempt_after_attempt_until_the_user_stops_it() -> None:
    job, now = running(-2), NOW
    for attempt in range(4):
        assert job.attempt == attempt and job.state == JobState.RUNNING
        now += 100
        job, _ = ended(job, 0, now)
        assert job.sub_state == SubState.RETRY_PENDING
        now = job.retry_at_ms or 0
        requeued = lifecycle.retry_due(job, now)
        assert requeued is not None
        job = requeued[0]
        assert job.sub_state == SubState.QUEUED and job.exit_phrase == "Succeeded"
        [past] = job.archived
        assert past.attempt == attempt and past.exit_code == 0
        job, _ = lifecycle.task_started(placed(job), started(attempt=job.attempt), now) or (job, [])
    assert job.retry_counts == RetryCounts(user=4)
    change = lifecycle.stop_requested(job, "alice", now + 5)
    assert change is not None
    job, events = change
    assert (job.state, job.exit_code, job.exit_reason) == (JobState.STOPPED, -210, "stopped by alice")
    assert isinstance(events[0], JobCompleted)
    after, _ = lifecycle.task_exited(job, exited(143, attempt=job.attempt), now + 6, POLICY) or (job, [])
    assert after.state == JobState.STOPPED and after.tasks[0].state == TaskState.STOPPED, "no restart"


@pytest.mark.parametrize("moment", ["retry pending", "queued", "starting"])
def test_a_stop_ends_a_minus_2_job_at_any_moment(moment: str) -> None:
    job, _ = ended(running(-2), 0, NOW + 100)
    if moment != "retry pending":
        job = (lifecycle.retry_due(job, job.retry_at_ms or 0) or (job, []))[0]
    if moment == "starting":
        job = placed(job)
    assert job.state == JobState.WAITING and job.sub_state != SubState.COMPLETED
    change = lifecycle.stop_requested(job, "alice", NOW + 10**6)
    assert change is not None
    stopped = change[0]
    assert stopped.state == JobState.STOPPED and stopped.retry_at_ms is None
    assert lifecycle.retry_due(stopped, NOW + 10**9) is None, "a stopped job never starts again"


def test_a_crash_loop_backs_off_up_to_the_cap() -> None:
    job, now, delays = running(-2), NOW, []
    for _ in range(9):
        now += 100  # each attempt dies at once
        job, _ = ended(job, 3, now)
        delays.append((job.retry_at_ms or 0) - now)
        now = job.retry_at_ms or 0
        job = (lifecycle.retry_due(job, now) or (job, []))[0]
        job, _ = lifecycle.task_started(placed(job), started(attempt=job.attempt), now) or (job, [])
    assert delays == [1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000, 60000]


@pytest.mark.parametrize(("ran_ms", "delay", "streak"), [
    (60_001, 1000, 1),   # ran longer than the cap: restart after the base delay
    (60_000, 32_000, 6),  # not longer: the crash loop's backoff goes on
    (100, 32_000, 6),
])
def test_a_long_run_resets_the_backoff(ran_ms: int, delay: int, streak: int) -> None:
    job = running(-2, attempt=5).model_copy(update={"backoff_streak": 5})
    job, _ = ended(job, 0, NOW + ran_ms)
    assert (job.retry_at_ms or 0) - (NOW + ran_ms) == delay and job.backoff_streak == streak


def test_an_attempt_that_never_launched_counts_as_quick() -> None:
    """A container that never started (here: the engine failed to start it) ran for no time at all,
    however long it took to fail."""
    job = one_task_job(retryCount=-1).model_copy(update={"backoff_streak": 2})
    job, _ = lifecycle.task_exited(job, exited(125), NOW + 10**7, POLICY) or (job, [])
    assert job.launched_ms is None and job.retry_counts == RetryCounts(platform=1)
    assert (job.retry_at_ms or 0) - (NOW + 10**7) == 4000 and job.backoff_streak == 3

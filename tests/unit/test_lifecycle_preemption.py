"""A preempted attempt: ended by the scheduler's mark as exit -1004, a platform retry no cap ends, queued
again at once with its original age; nothing for a mark of another attempt or a job already ending."""

from __future__ import annotations

import pytest

from shared.events import JobRequeued, JobRetrying, StopTasks
from shared.jobconfig.model import RETRY_ALWAYS, RETRY_UNLIMITED
from shared.lifecycle import transitions as lifecycle
from shared.lifecycle.exitcodes import PREEMPTED
from shared.lifecycle.exitspec import load_table
from shared.lifecycle.transitions import RetryPolicy
from shared.records import JobRecord, JobState, PreemptedBy, RetryCounts, SubState, TaskState
from tests.unit.factories import make_config, make_job, make_task, role_dict

pytestmark = pytest.mark.unit

NOW = 1_800_000_000_000
CREATED = 1_700_000_000_000
POLICY = RetryPolicy(table=load_table(), max_platform_retries=3, backoff_base_ms=1000, backoff_max_ms=60_000)
REASON = "preempted by job carol~boss (prod, vc a): borrowed capacity of vc a"


def mark(attempt: int = 2) -> PreemptedBy:
    return PreemptedBy(attempt=attempt, by="carol~boss", by_vc="a", by_priority="prod",
                       why="borrowed capacity of vc a", at_ms=NOW - 5)


def victim(*, retry_count: int = 0, attempt: int = 2, preempted: PreemptedBy | None = None,
           **update: object) -> JobRecord:
    """bob's job in attempt ``attempt``: two tasks running on n1 and n2, one of a second role not yet placed."""
    config = make_config(role_dict("main", taskNumber=2), role_dict("side"), jobName="victim", virtualCluster="b",
                         retryCount=retry_count)
    job = make_job(config, user="bob", attempt=attempt, tasks=[
        make_task("main", 0, TaskState.RUNNING, node_id="n1"), make_task("main", 1, TaskState.RUNNING, node_id="n2"),
        make_task("side", 0, TaskState.WAITING)])
    return job.model_copy(update={"sub_state": SubState.RUNNING, "launched_ms": NOW - 10_000,
                                  "queued_ms": NOW - 60_000, "backoff_streak": 2, "preempted": preempted,
                                  "preempted_by": ("carol~boss",), **update})


def preempt(job: JobRecord) -> tuple[JobRecord, list[object]]:
    change = lifecycle.preempted(job, NOW, POLICY)
    assert change is not None
    return change[0], list(change[1])


@pytest.mark.parametrize(("retry_count", "counts"), [
    (0, RetryCounts()),
    (2, RetryCounts(user=2)),  # retryCount used up: a preemption is not the user's
    (0, RetryCounts(platform=3)),  # the platform cap reached: still retried
    (0, RetryCounts(platform=50, resource=3)),
    (RETRY_UNLIMITED, RetryCounts(user=7)),
    (RETRY_ALWAYS, RetryCounts()),
])
def test_a_preempted_attempt_is_a_platform_retry_no_cap_ends(retry_count: int, counts: RetryCounts) -> None:
    the_mark = mark()
    job, events = preempt(victim(retry_count=retry_count, preempted=the_mark, retry_counts=counts,
                                 retries=counts.total))
    assert (job.state, job.sub_state) == (JobState.WAITING, SubState.RETRY_PENDING)
    assert (job.exit_code, job.exit_phrase, job.exit_type, job.exit_reason) == (
        PREEMPTED, "ContainerPreempted", "PLATFORM_FAILURE", REASON)
    assert job.retry_counts == counts.model_copy(update={"platform": counts.platform + 1})
    assert job.retries == counts.total + 1
    assert job.retry_at_ms == NOW, "no delay"
    assert job.backoff_streak == 2, "the backoff streak is not the job's fault: unchanged"
    assert job.attempt == 2 and job.preempted == the_mark, "the mark stays until the next attempt is queued"
    retrying = events[0]
    assert isinstance(retrying, JobRetrying)
    assert (retrying.data.attempt, retrying.data.exit_code, retrying.data.counter, retrying.data.retry_at_ms) == (
        2, PREEMPTED, "platform", NOW)


def test_its_containers_are_stopped_not_as_a_users_stop() -> None:
    job, events = preempt(victim(preempted=mark()))
    stops = [e for e in events if isinstance(e, StopTasks)]
    assert [(s.data.node_id, s.data.attempt, s.data.by_user) for s in stops] == [("n1", 2, False), ("n2", 2, False)]
    assert all(s.data.reason == job.reason for s in stops)
    assert job.reason == ("attempt 2 preempted by job carol~boss (prod, vc a): borrowed capacity of vc a; retry 1, "
                          "not counted against retryCount (platform retry 1), in 0s"), "who preempted it"
    side = job.tasks[2]
    assert (side.state, side.reason) == (TaskState.STOPPED, "the attempt ended before this task started")
    assert [t.state for t in job.tasks[:2]] == [TaskState.RUNNING] * 2, "they run until their containers stop"


@pytest.mark.parametrize("job", [
    victim(),  # no mark
    victim(preempted=mark(attempt=1)),  # a mark of an attempt that is over
    victim(preempted=mark(), state=JobState.WAITING, sub_state=SubState.RETRY_PENDING),  # ending already
    victim(preempted=mark(), state=JobState.FAILED, sub_state=SubState.COMPLETED),
    victim(preempted=mark(), state=JobState.STOPPED, sub_state=SubState.STOPPING),
], ids=["no mark", "stale mark", "retry pending", "failed", "stopped"])
def test_nothing_to_do(job: JobRecord) -> None:
    assert lifecycle.preempted(job, NOW, POLICY) is None


def test_a_preempted_job_that_has_not_started_yet_is_requeued_too() -> None:
    job, _ = preempt(victim(preempted=mark(), state=JobState.WAITING, sub_state=SubState.STARTING))
    assert (job.sub_state, job.exit_code) == (SubState.RETRY_PENDING, PREEMPTED)


def ended(job: JobRecord) -> JobRecord:
    return job.model_copy(update={"tasks": tuple(
        t.model_copy(update={"state": TaskState.STOPPED, "exit_code": 143}) if t.state == TaskState.RUNNING else t
        for t in job.tasks)})


@pytest.mark.parametrize(("queued_ms", "age"), [(NOW - 60_000, NOW - 60_000), (None, CREATED)])
def test_the_next_attempt_keeps_the_queue_age(queued_ms: int | None, age: int) -> None:
    job, _ = preempt(victim(preempted=mark(), queued_ms=queued_ms))
    assert lifecycle.retry_due(job, NOW + 1) is None, "its containers still run"
    change = lifecycle.retry_due(ended(job), NOW + 1)
    assert change is not None
    requeued, events = change
    assert (requeued.attempt, requeued.sub_state, requeued.queued_ms) == (3, SubState.QUEUED, age)
    assert requeued.preempted is None and requeued.preempted_by == ("carol~boss",)
    assert requeued.reason == f"attempt 3 queued after: {REASON}"
    assert [t.state for t in requeued.tasks] == [TaskState.WAITING] * 3
    assert [type(e) for e in events] == [JobRequeued]


def test_an_ordinary_retry_queues_at_the_time_it_is_due() -> None:
    # For contrast: a platform failure that was not a preemption joins the queue's end.
    job, _ = preempt(victim(preempted=mark()))
    failed = ended(job).model_copy(update={"exit_code": -1001})
    change = lifecycle.retry_due(failed, NOW + 1)
    assert change is not None and change[0].queued_ms == NOW + 1

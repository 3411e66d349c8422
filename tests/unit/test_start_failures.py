"""A task that can never start fails its job instead of being retried as a platform failure forever.

Tables over sequences of attempts: each attempt's task either ran (its start reported) or was refused
by the engine before it ran (exit 125 with the engine's words), and the job's state after each.
"""

from __future__ import annotations

import pytest

from shared.events import JobCompleted, TaskExitedData, TaskStartedData
from shared.lifecycle import transitions as lifecycle
from shared.lifecycle.exitcodes import ENGINE_FAILURE
from shared.lifecycle.exitspec import load_table
from shared.lifecycle.transitions import RetryPolicy, error_shape, start_failures
from shared.records import JobRecord, JobState, SubState
from tests.unit.factories import make_config, make_job

pytestmark = pytest.mark.unit

NOW = 1_800_000_000_000
POLICY = RetryPolicy(table=load_table(), max_platform_retries=10, backoff_base_ms=1000, backoff_max_ms=60_000)

TOO_LONG = ("the engine could not start the container: Error processing tar file(exit status 1): open "
            "/root/.ssh/alice~" + "x" * 255 + ": file name too long")
NO_SPACE = "the engine could not start the container: write /var/lib/docker/tmp/x: no space left on device"


def _shape_of_attempt(attempt: int) -> str:
    """The engine's words for one attempt's container, naming it (its name holds the attempt) and its id."""
    return (f'the engine refused to create the container: Conflict. The container name "/paiq-alice-j-{attempt}-main-0-'
            f'{attempt:08x}" is already in use by container "{attempt:064x}"')


# An attempt: ("refused", engine words) ends before the container ran; ("ran", exit code) after it ran.
Attempt = tuple[str, str | int]


def run(attempts: list[Attempt], retry_count: int = 0) -> list[JobRecord]:
    """The job after each attempt (a one-task job, retried as its policy says)."""
    job = make_job(make_config(retryCount=retry_count), state=JobState.WAITING)
    job = job.model_copy(update={"sub_state": SubState.STARTING})
    after: list[JobRecord] = []
    for n, (kind, what) in enumerate(attempts):
        assert job.attempt == n and job.state == JobState.WAITING, (n, job.state, job.reason)
        if kind == "ran":
            job, _ = lifecycle.task_started(job, TaskStartedData(
                job_id=job.id, attempt=n, role="main", index=0, node_id="n1", container_id=f"c{n}"), NOW) or (job, [])
            code, reason = int(what), f"exit {what}"
        else:
            code, reason = ENGINE_FAILURE, str(what)
        change = lifecycle.task_exited(job, TaskExitedData(
            job_id=job.id, attempt=n, role="main", index=0, node_id="n1", exit_code=code, reason=reason), NOW, POLICY)
        assert change is not None
        job = change[0]
        after.append(job)
        if job.state.is_final:
            break
        job = (lifecycle.retry_due(job, job.retry_at_ms or 0) or (job, []))[0]
    return after


@pytest.mark.parametrize(("attempts", "counts", "final"), [
    # the same refusal three times: the third fails the job
    ([("refused", TOO_LONG)] * 3, [1, 2, 3], JobState.FAILED),
    # the same refusal, its names and ids aside (they hold the attempt)
    ([("refused", _shape_of_attempt(n)) for n in range(3)], [1, 2, 3], JobState.FAILED),
    # a different refusal in between starts the count again
    ([("refused", TOO_LONG), ("refused", NO_SPACE), ("refused", TOO_LONG), ("refused", TOO_LONG)],
     [1, 1, 1, 2], JobState.WAITING),
    # an attempt whose container ran (and was killed from outside) in between starts it again too
    ([("refused", TOO_LONG), ("refused", TOO_LONG), ("ran", 137), ("refused", TOO_LONG), ("refused", TOO_LONG)],
     [1, 2, 0, 1, 2], JobState.WAITING),
    # a command's own exit 125 (its container ran) is no refusal: platform retries, capped as before
    ([("ran", ENGINE_FAILURE)] * 4, [0, 0, 0, 0], JobState.WAITING),
])
def test_the_same_refusal_in_attempts_in_a_row(attempts: list[Attempt], counts: list[int], final: JobState) -> None:
    after = run(attempts)
    assert [j.start_failures for j in after] == counts
    assert after[-1].state == final


def test_a_job_that_can_never_start_fails_saying_why() -> None:
    *retried, failed = run([("refused", TOO_LONG)] * 3)
    assert all(j.sub_state == SubState.RETRY_PENDING and j.retry_counts.platform == i + 1
               for i, j in enumerate(retried))
    assert failed.state == JobState.FAILED and failed.exit_code == ENGINE_FAILURE
    assert failed.exit_reason.startswith("the task cannot start: the engine refused its container with the same "
                                         "error in 3 attempts in a row, so it is not retried; ")
    assert failed.exit_reason.endswith(": file name too long"), "the engine's own words close the reason"
    assert (failed.exit_phrase, failed.exit_type) == ("ContainerStartFailed", "PLATFORM_FAILURE")
    assert failed.retry_counts.platform == 2


@pytest.mark.parametrize("retry_count", [-2, -1, 5])
def test_whatever_the_retry_count_even_a_service(retry_count: int) -> None:
    after = run([("refused", TOO_LONG)] * 3, retry_count=retry_count)
    assert after[-1].state == JobState.FAILED


def test_a_service_that_ran_is_started_again_as_before() -> None:
    after = run([("ran", 0), ("ran", 3), ("refused", TOO_LONG), ("ran", 0)], retry_count=-2)
    assert [j.state for j in after] == [JobState.WAITING] * 4


def test_the_job_completed_event_carries_the_reason() -> None:
    job = make_job(make_config(), state=JobState.WAITING).model_copy(update={
        "sub_state": SubState.STARTING, "start_failures": 2, "exit_code": ENGINE_FAILURE,
        "exit_reason": f"1 task(s) of role main failed (minFailedTaskCount 1); main[0] exited 125: {TOO_LONG}"})
    change = lifecycle.task_exited(job, TaskExitedData(job_id=job.id, attempt=0, role="main", index=0, node_id="n1",
                                                       exit_code=ENGINE_FAILURE, reason=TOO_LONG), NOW, POLICY)
    assert change is not None
    _, events = change
    completed = next(e for e in events if isinstance(e, JobCompleted))
    assert completed.data.state == JobState.FAILED and "the task cannot start" in completed.data.reason


@pytest.mark.parametrize(("a", "b", "same"), [
    (TOO_LONG, TOO_LONG, True),
    (_shape_of_attempt(1), _shape_of_attempt(2), True),
    ("listen tcp 0.0.0.0:31000: bind: address already in use", "listen tcp 0.0.0.0:31001: bind: address already in use",
     True),
    (TOO_LONG, NO_SPACE, False),
    ("", TOO_LONG, False),
])
def test_error_shape(a: str, b: str, same: bool) -> None:
    assert (error_shape(a) == error_shape(b)) is same


def test_only_failures_count() -> None:
    from shared.lifecycle.completion import Completion
    job = make_job(make_config(), state=JobState.WAITING)
    for outcome in (Completion(state=JobState.SUCCEEDED, exit_code=0, reason="done"),
                    Completion(state=JobState.STOPPED, exit_code=-210, reason="stopped"),
                    Completion(state=JobState.FAILED, exit_code=ENGINE_FAILURE, reason=TOO_LONG)):  # no trigger
        assert start_failures(job, outcome) == 0

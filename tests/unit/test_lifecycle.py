"""The job/task state machine and the retry policy, as tables over (job, event) -> job, events."""

from __future__ import annotations

import pytest

from shared.events import (
    JobCompleted,
    JobRequeued,
    JobRetrying,
    StopTasks,
    TaskExitedData,
    TaskProgressData,
    TaskStartedData,
)
from shared.lifecycle import transitions as lifecycle
from shared.lifecycle.exitspec import ExitType, Reaction, load_table, parse_table
from shared.lifecycle.transitions import RetryPolicy
from shared.records import JobRecord, JobState, SubState, TaskState, TaskSubState
from tests.unit.factories import make_config, make_job, role_dict

pytestmark = pytest.mark.unit

NOW = 1_800_000_000_000
POLICY = RetryPolicy(table=load_table(), max_platform_retries=3, backoff_base_ms=1000, backoff_max_ms=60_000)


def started(role: str = "main", index: int = 0, attempt: int = 0) -> TaskStartedData:
    return TaskStartedData(job_id="alice~job1", attempt=attempt, role=role, index=index, node_id="n1",
                           container_id=f"c-{role}-{index}")


def exited(code: int, role: str = "main", index: int = 0, attempt: int = 0) -> TaskExitedData:
    return TaskExitedData(job_id="alice~job1", attempt=attempt, role=role, index=index, node_id="n1",
                          exit_code=code, reason=f"exit {code}", diagnostics="last lines")


def placed(job: JobRecord) -> JobRecord:
    return job.model_copy(update={"state": JobState.WAITING, "sub_state": SubState.STARTING})


def one_task_job(**config: object) -> JobRecord:
    return placed(make_job(make_config(**config), state=JobState.WAITING))


def test_first_task_start_makes_the_job_running() -> None:
    change = lifecycle.task_started(one_task_job(), started(), NOW)
    assert change is not None
    job, events = change
    assert (job.state, job.sub_state, job.launched_ms) == (JobState.RUNNING, SubState.RUNNING, NOW)
    assert job.tasks[0].state == TaskState.RUNNING and job.tasks[0].container_id == "c-main-0"
    assert events == []


@pytest.mark.parametrize("event", [started(attempt=1), started(index=5)])
def test_reports_of_another_attempt_or_task_change_nothing(event: TaskStartedData) -> None:
    assert lifecycle.task_started(one_task_job(), event, NOW) is None


def test_a_duplicate_report_changes_nothing() -> None:
    job, _ = lifecycle.task_started(one_task_job(), started(), NOW) or (None, None)
    assert job is not None
    assert lifecycle.task_started(job, started(), NOW + 1) is None
    done, _ = lifecycle.task_exited(job, exited(0), NOW + 2, POLICY) or (None, None)
    assert done is not None
    assert lifecycle.task_exited(done, exited(0), NOW + 3, POLICY) is None


def test_pulling_shows_on_the_task_and_the_job() -> None:
    progress = TaskProgressData(job_id="alice~job1", attempt=0, role="main", index=0, node_id="n1",
                                sub_state=TaskSubState.PULLING, detail="pulling busybox:latest")
    change = lifecycle.task_progress(one_task_job(), progress, NOW)
    assert change is not None
    job, _ = change
    assert job.sub_state == SubState.PULLING and job.tasks[0].sub_state == TaskSubState.PULLING
    job2, _ = lifecycle.task_started(job, started(), NOW) or (None, None)
    assert job2 is not None and job2.sub_state == SubState.RUNNING and job2.tasks[0].sub_state == TaskSubState.NONE


@pytest.mark.parametrize(("code", "state", "phrase"), [
    (0, JobState.SUCCEEDED, "Succeeded"),
    (3, JobState.FAILED, "UserFailure"),
    (-1200, JobState.FAILED, "ContainerOOMKilled"),
    (254, JobState.FAILED, "ImagePullFailed"),
])
def test_single_task_outcomes_without_retries(code: int, state: JobState, phrase: str) -> None:
    running, _ = lifecycle.task_started(one_task_job(), started(), NOW) or (None, None)
    assert running is not None
    change = lifecycle.task_exited(running, exited(code), NOW + 5, POLICY)
    assert change is not None
    job, events = change
    assert (job.state, job.sub_state, job.exit_code, job.exit_phrase) == (state, SubState.COMPLETED, code, phrase)
    assert job.completed_ms == NOW + 5
    [event] = events
    assert isinstance(event, JobCompleted) and event.data.state == state


@pytest.mark.parametrize(("code", "retry_count", "counter"), [
    (3, 2, "user"),            # RETRY_TO_MAX while retryCount allows
    (-1001, 0, "platform"),    # node lost: transient, retried without using retryCount
    (137, 0, "platform"),      # killed from outside
    (251, 0, "resource"),      # gang allocation timeout: backoff retry
])
def test_failures_the_policy_retries(code: int, retry_count: int, counter: str) -> None:
    running, _ = lifecycle.task_started(one_task_job(retryCount=retry_count), started(), NOW) or (None, None)
    assert running is not None
    change = lifecycle.task_exited(running, exited(code), NOW, POLICY)
    assert change is not None
    job, events = change
    assert job.state == JobState.WAITING and job.sub_state == SubState.RETRY_PENDING
    assert getattr(job.retry_counts, counter) == 1 and job.retries == 1
    assert f"failed with exit {code}" in job.reason and "retry 1" in job.reason
    [event] = events
    assert isinstance(event, JobRetrying) and event.data.counter == counter
    assert job.retry_at_ms is not None and job.retry_at_ms > NOW


@pytest.mark.parametrize("code", [254, -1200, -1203, 139])
def test_permanent_failures_are_never_retried(code: int) -> None:
    running, _ = lifecycle.task_started(one_task_job(retryCount=5), started(), NOW) or (None, None)
    assert running is not None
    job, _ = lifecycle.task_exited(running, exited(code), NOW, POLICY) or (None, None)
    assert job is not None and job.state == JobState.FAILED and job.retries == 0


def test_retry_count_is_used_up_then_the_job_fails() -> None:
    job = one_task_job(retryCount=1)
    for attempt, expect in ((0, JobState.WAITING), (1, JobState.FAILED)):
        running, _ = lifecycle.task_started(job, started(attempt=attempt), NOW) or (None, None)
        assert running is not None
        job, _ = lifecycle.task_exited(running, exited(3, attempt=attempt), NOW, POLICY) or (None, None)
        assert job is not None and job.state == expect
        if expect == JobState.WAITING:
            requeued = lifecycle.retry_due(job, job.retry_at_ms or 0)
            assert requeued is not None
            job = requeued[0]
    assert job.retry_counts.user == 1 and job.exit_code == 3 and len(job.archived) == 1


def test_platform_retries_are_capped() -> None:
    job = one_task_job()
    for attempt in range(POLICY.max_platform_retries + 1):
        running, _ = lifecycle.task_started(job, started(attempt=attempt), NOW) or (None, None)
        assert running is not None
        job, _ = lifecycle.task_exited(running, exited(-1001, attempt=attempt), NOW, POLICY) or (None, None)
        assert job is not None
        if job.state == JobState.FAILED:
            break
        job = (lifecycle.retry_due(job, job.retry_at_ms or 0) or (job, []))[0]
    assert job.state == JobState.FAILED and job.retry_counts.platform == POLICY.max_platform_retries


def test_the_next_attempt_waits_for_its_delay_and_for_every_task_of_the_last() -> None:
    config = make_config(role_dict("ps", taskNumber=1), role_dict("worker", taskNumber=1), retryCount=1)
    job = placed(make_job(config, state=JobState.WAITING))
    for role in ("ps", "worker"):
        job, _ = lifecycle.task_started(job, started(role), NOW) or (job, [])
    failed, _ = lifecycle.task_exited(job, exited(3, "worker"), NOW, POLICY) or (None, None)
    assert failed is not None and failed.sub_state == SubState.RETRY_PENDING
    assert failed.tasks[0].state == TaskState.RUNNING, "ps still runs until its launcher stops it"
    assert lifecycle.retry_due(failed, NOW + 10**9) is None, "not while a task of the attempt runs"
    stopped, _ = lifecycle.task_exited(failed, exited(143, "ps"), NOW + 10, POLICY) or (None, None)
    assert stopped is not None and stopped.tasks[0].state == TaskState.STOPPED
    assert stopped.sub_state == SubState.RETRY_PENDING, "an exit after the attempt ended decides nothing"
    assert lifecycle.retry_due(stopped, (stopped.retry_at_ms or 0) - 1) is None, "not before the delay"
    change = lifecycle.retry_due(stopped, stopped.retry_at_ms or 0)
    assert change is not None
    job, events = change
    assert (job.attempt, job.sub_state, job.state) == (1, SubState.QUEUED, JobState.WAITING)
    assert all(t.state == TaskState.WAITING and t.node_id is None for t in job.tasks)
    [past] = job.archived
    assert past.attempt == 0 and past.exit_code == 3 and past.trigger_role == "worker"
    assert [t.state for t in past.tasks] == [TaskState.STOPPED, TaskState.FAILED]
    assert isinstance(events[0], JobRequeued) and events[0].data.attempt == 1
    assert job.exit_code == 3, "the job shows the last attempt's exit until the next one ends"


def test_min_succeeded_completes_the_job_while_ps_run_and_the_ps_are_then_stopped() -> None:
    config = make_config(role_dict("ps", taskNumber=2), role_dict("worker", taskNumber=2, minSucceededTaskCount=2))
    job = placed(make_job(config, state=JobState.WAITING))
    for role, index in (("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1)):
        job, _ = lifecycle.task_started(job, started(role, index), NOW) or (job, [])
    job, _ = lifecycle.task_exited(job, exited(0, "worker", 0), NOW, POLICY) or (job, [])
    assert job.state == JobState.RUNNING
    change = lifecycle.task_exited(job, exited(0, "worker", 1), NOW + 1, POLICY)
    assert change is not None
    job, events = change
    assert job.state == JobState.SUCCEEDED and job.sub_state == SubState.STOPPING
    assert job.trigger_role == "worker" and isinstance(events[0], JobCompleted)
    for index in (0, 1):
        job, _ = lifecycle.task_exited(job, exited(143, "ps", index), NOW + 2, POLICY) or (job, [])
    assert [t.state for t in job.tasks[:2]] == [TaskState.STOPPED, TaskState.STOPPED]
    assert job.state == JobState.SUCCEEDED and job.sub_state == SubState.COMPLETED


def test_stop_ends_the_job_at_once_and_closes_tasks_that_never_started() -> None:
    config = make_config(role_dict("main", taskNumber=2))
    job = placed(make_job(config, state=JobState.WAITING))
    job, _ = lifecycle.task_started(job, started("main", 0), NOW) or (job, [])
    change = lifecycle.stop_requested(job, "bob", NOW)
    assert change is not None
    job, events = change
    assert (job.state, job.exit_code, job.exit_type) == (JobState.STOPPED, -210, ExitType.USER_STOP.value)
    assert job.exit_reason == "stopped by bob" and job.sub_state == SubState.STOPPING
    assert [t.state for t in job.tasks] == [TaskState.RUNNING, TaskState.STOPPED]
    assert isinstance(events[0], JobCompleted)
    assert lifecycle.stop_requested(job, "bob", NOW) is None, "stopping a finished job changes nothing"


def test_a_start_reported_after_the_job_ended_changes_nothing() -> None:
    """The job's end closed its never-started tasks (their resources are free); the launcher drops or
    stops such a late container itself, so the record must not revive the task."""
    job = placed(make_job(make_config(role_dict("main", taskNumber=2)), state=JobState.WAITING))
    stopped, _ = lifecycle.stop_requested(job, "bob", NOW) or (job, [])
    assert [t.state for t in stopped.tasks] == [TaskState.STOPPED, TaskState.STOPPED]
    assert lifecycle.task_started(stopped, started(), NOW + 1) is None


def test_a_task_running_when_its_job_ends_keeps_holding_until_it_exits() -> None:
    job = placed(make_job(make_config(role_dict("main", taskNumber=2)), state=JobState.WAITING))
    job, _ = lifecycle.task_started(job, started("main", 0), NOW) or (job, [])
    stopped, _ = lifecycle.stop_requested(job, "bob", NOW) or (job, [])
    assert stopped.tasks[0].state == TaskState.RUNNING and stopped.sub_state == SubState.STOPPING
    done, _ = lifecycle.task_exited(stopped, exited(143), NOW + 5, POLICY) or (stopped, [])
    assert done.tasks[0].state == TaskState.STOPPED and done.sub_state == SubState.COMPLETED


def test_exit_spec_table_is_complete_and_well_formed() -> None:
    table = load_table()
    for code in (0, -200, -210, -220, -1000, -1001, -1200, -1202, -1203, -1205, 125, 130, 134, 137, 143, 251,
                 253, 254):
        assert code in table.entries, code
    assert table.spec(0).type == ExitType.USER_SUCCESS
    assert table.spec(42).reaction == Reaction.RETRY_TO_MAX and table.spec(42).type == ExitType.USER_FAILURE
    assert table.spec(-77).type == ExitType.UNKNOWN_FAILURE


def test_an_operator_table_overrides_reactions() -> None:
    table = parse_table("- {code: 3, phrase: Flaky, type: PLATFORM_FAILURE, reaction: ALWAYS_RETRY, reason: r}")
    policy = RetryPolicy(table=table, max_platform_retries=2)
    running, _ = lifecycle.task_started(one_task_job(), started(), NOW) or (None, None)
    assert running is not None
    job, _ = lifecycle.task_exited(running, exited(3), NOW, policy) or (None, None)
    assert job is not None and job.sub_state == SubState.RETRY_PENDING and job.retry_counts.platform == 1


@pytest.mark.parametrize("text", ["not: a list", "- {code: 1}", "- {code: 1, phrase: a, type: NOPE, reaction: "
                                  "NEVER_RETRY, reason: r}"])
def test_a_broken_operator_table_is_refused_with_the_setting_named(text: str) -> None:
    from shared.errors import SettingsError

    with pytest.raises(SettingsError) as refused:
        parse_table(text)
    assert refused.value.name == "PAIQ_EXIT_SPEC"


@pytest.mark.parametrize(("tasks", "kept"), [(1, 4000), (128, 4000), (1000, 524), (2000, 262), (100_000, 256)])
def test_a_job_document_keeps_a_bounded_share_of_each_tasks_stderr_tail(tasks: int, kept: int) -> None:
    assert len(lifecycle.kept_diagnostics("x" * 5000, tasks)) == kept
    assert lifecycle.kept_diagnostics("ab" * 3000, tasks).endswith("ab"), "the end of the tail is kept"


def test_a_big_job_keeps_its_trigger_tasks_whole_tail_while_its_tasks_keep_their_share() -> None:
    config = make_config(role_dict("main", taskNumber=2000))
    job = placed(make_job(config, state=JobState.WAITING))
    job, _ = lifecycle.task_started(job, started(), NOW) or (job, [])
    tail = "e" * 3000
    exit_data = exited(3).model_copy(update={"diagnostics": tail})
    change = lifecycle.task_exited(job, exit_data, NOW, POLICY)
    assert change is not None
    ended, _ = change
    assert ended.state == JobState.FAILED
    assert ended.exit_diagnostics == tail, "the job's own diagnostics: the trigger's whole tail"
    assert len(ended.tasks[0].diagnostics) == lifecycle.JOB_DIAGNOSTICS_BUDGET // 2000


def _on_nodes(job: JobRecord, nodes: list[str | None]) -> JobRecord:
    tasks = tuple(t.model_copy(update={"node_id": n, "ip": "10.0.0.1" if n else None,
                                       "state": TaskState.RUNNING if n else TaskState.WAITING})
                  for t, n in zip(job.tasks, nodes, strict=True))
    return job.model_copy(update={"tasks": tasks})


def test_a_stopped_job_sends_one_stop_to_each_node_holding_its_tasks_and_none_elsewhere() -> None:
    job = _on_nodes(placed(make_job(make_config(role_dict("main", taskNumber=4)), state=JobState.RUNNING)),
                    ["n1", "n2", "n1", None])
    change = lifecycle.stop_requested(job, "alice", NOW)
    assert change is not None
    stops = [e for e in change[1] if isinstance(e, StopTasks)]
    assert [(e.routing_key, e.data.attempt, e.data.by_user) for e in stops] == [
        ("node.n1.stop", None, True), ("node.n2.stop", None, True)]


def test_a_failed_attempt_stops_only_that_attempt_on_the_nodes_still_running_it() -> None:
    job = _on_nodes(placed(make_job(make_config(role_dict("main", taskNumber=3), retryCount=1),
                                    state=JobState.RUNNING)), ["n1", "n2", "n3"])
    change = lifecycle.task_exited(job, exited(3, index=0), NOW, POLICY)
    assert change is not None
    ended, events = change
    assert ended.sub_state == SubState.RETRY_PENDING
    stops = [e for e in events if isinstance(e, StopTasks)]
    assert [(e.data.node_id, e.data.attempt, e.data.by_user) for e in stops] == [("n2", 0, False), ("n3", 0, False)]

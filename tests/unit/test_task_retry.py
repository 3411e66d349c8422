"""taskRetryCount: a failed run of a task re-run in place (shared/lifecycle/taskretry.py), as tables: the
decision alone, then the state machine around it, then the launcher's view of runs that are not current."""

from __future__ import annotations

from typing import Any

import pytest

from services.launcher.decide import Action, ContainerState, Prompt, Seen, decide
from shared.events import JobCompleted, RelaunchTask, StopTasks, TaskExitedData, TaskStartedData
from shared.jobconfig.model import JobConfig
from shared.lifecycle import transitions as lifecycle
from shared.lifecycle.exitspec import load_table
from shared.lifecycle.taskretry import decide_task_retry, relaunch_delay_ms, retries_in_place
from shared.lifecycle.transitions import RetryPolicy
from shared.records import JobRecord, JobState, SubState, TaskRecord, TaskState
from shared.taskref import TaskRef
from tests.unit.factories import make_config, make_job, make_task, role_dict

pytestmark = pytest.mark.unit

NOW = 1_800_000_000_000
TABLE = load_table()
POLICY = RetryPolicy(table=TABLE, max_platform_retries=3, backoff_base_ms=1000, backoff_max_ms=60_000)


def config(task_retry_count: int | None = 2, *, gang: object = False, tasks: int = 1,
           **role: Any) -> JobConfig:
    """A job of one role ``main``; ``gang``: ``extras.gangAllocation`` (None: not written)."""
    extras = {} if gang is None else {"gangAllocation": gang}
    c = make_config(role_dict(taskNumber=tasks, **role), extras=extras)
    roles = (c.task_roles[0].model_copy(update={"task_retry_count": task_retry_count}),)
    return c.model_copy(update={"task_roles": roles})


def run(retries: int = 0, accountable: int = 0, *, started: bool = True, node: str | None = "n1") -> TaskRecord:
    return make_task(node_id=node, ip="10.0.0.1").model_copy(update={
        "retries": retries, "accountable_retries": accountable, "started_ms": NOW - 1000 if started else None})


@pytest.mark.parametrize(("why", "cfg", "task", "code", "expect"), [
    ("success ends the task", config(), run(), 0, None),
    ("gang allocation (the default) never re-runs a task, as OpenPAI", config(gang=None), run(), 3, None),
    ("gangAllocation true: the same", config(gang=True), run(), 3, None),
    ("gangAllocation must be the boolean false", config(gang="false"), run(), 3, None),
    ("the user's code: re-run, counted", config(2), run(), 3, ("user", 1, 1)),
    ("second of two", config(2), run(1, 1), 3, ("user", 2, 2)),
    ("taskRetryCount spent: the task fails", config(2), run(2, 2), 3, None),
    ("taskRetryCount absent is 0", config(None), run(), 3, None),
    ("-1: without limit", config(-1), run(40, 40), 1, ("user", 41, 41)),
    ("permanent (command not found): never", config(2), run(), -1203, None),
    ("out of memory: never (NEVER_RETRY)", config(2), run(), -1200, None),
    ("stopped by its user: never", config(2), run(), -210, None),
    ("its node was lost: nowhere to run it again", config(2), run(), -1001, None),
    ("the engine refused it before it ran: the job's policy decides", config(2), run(started=False), 125, None),
    ("the engine failed it after it ran: transient, not counted", config(2), run(), 125, ("platform", 1, 0)),
    ("killed from outside (137): transient, even with taskRetryCount 0", config(0), run(), 137, ("platform", 1, 0)),
    ("transient after user retries: counted apart", config(1), run(1, 1), 143, ("platform", 2, 1)),
    ("transient retries bounded by max_platform_retries", config(2), run(3, 0), 137, None),
    ("a task never placed is never re-run", config(2), run(node=None), 3, None),
])
def test_the_decision(why: str, cfg: JobConfig, task: TaskRecord, code: int,
                      expect: tuple[str, int, int] | None) -> None:
    got = decide_task_retry(cfg, cfg.task_roles[0], task, code, "boom", table=TABLE, max_platform_retries=3)
    assert (None if got is None else (got.counter, got.retries, got.accountable_retries)) == expect, why


def test_the_reason_says_which_run_ended_and_what_is_left() -> None:
    cfg = config(2)
    got = decide_task_retry(cfg, cfg.task_roles[0], run(), 3, "command exited with code 3", table=TABLE,
                            max_platform_retries=3)
    assert got is not None
    assert got.reason == "run 0 exited 3 (command exited with code 3); task retry 1, 1 of 2 allowed"


def test_only_the_boolean_false_turns_it_on() -> None:
    assert retries_in_place(config(gang=False)) and not retries_in_place(config(gang=None))


@pytest.mark.parametrize(("task_attempt", "delay"), [(0, 0), (1, 1000), (2, 2000), (3, 4000), (10, 60_000)])
def test_a_re_run_waits_a_doubling_pause(task_attempt: int, delay: int) -> None:
    assert relaunch_delay_ms(task_attempt, 1000) == delay


# --- the state machine ---------------------------------------------------------------------------------------


def running_job(cfg: JobConfig, **task: Any) -> JobRecord:
    tasks = [make_task("main", i, node_id=f"n{i + 1}", ip="10.0.0.1").model_copy(
        update={"started_ms": NOW - 5000, "container_id": f"c{i}", **task})
        for i in range(cfg.task_roles[0].task_number)]
    return make_job(cfg, tasks=tasks).model_copy(update={"sub_state": SubState.RUNNING, "launched_ms": NOW - 5000})


def exited(code: int, *, task_attempt: int = 0, index: int = 0) -> TaskExitedData:
    return TaskExitedData(job_id="alice~job1", attempt=0, role="main", index=index, task_attempt=task_attempt,
                          node_id=f"n{index + 1}", exit_code=code, reason=f"command exited with code {code}",
                          diagnostics="Traceback ...")


def test_a_failed_run_with_retries_left_runs_again_on_its_node() -> None:
    change = lifecycle.task_exited(running_job(config(2)), exited(3), NOW, POLICY)
    assert change is not None
    job, events = change
    task = job.tasks[0]
    assert (job.state, job.sub_state) == (JobState.RUNNING, SubState.RUNNING), "not counted failed: the job runs on"
    assert (task.state, task.retries, task.accountable_retries) == (TaskState.WAITING, 1, 1)
    assert (task.node_id, task.exit_code, task.container_id, task.started_ms) == ("n1", None, None, None)
    assert "task retry 1, 1 of 2 allowed" in task.reason and task.diagnostics == "Traceback ..."
    assert [type(e) for e in events] == [RelaunchTask]
    command = events[0]
    assert isinstance(command, RelaunchTask)
    assert command.routing_key == "node.n1.relaunch"
    assert (command.data.task_attempt, command.data.role, command.data.index) == (1, "main", 0)


def test_a_redelivered_exit_of_the_earlier_run_changes_nothing() -> None:
    job, _ = lifecycle.task_exited(running_job(config(2)), exited(3), NOW, POLICY) or (None, [])
    assert job is not None
    assert lifecycle.task_exited(job, exited(3), NOW + 1, POLICY) is None, "it would retry twice"
    assert lifecycle.task_started(job, TaskStartedData(job_id=job.id, attempt=0, role="main", index=0,
                                                       node_id="n1", container_id="old"), NOW) is None


def test_fails_twice_then_succeeds() -> None:
    job = running_job(config(2))
    for n in range(2):
        job, _ = lifecycle.task_exited(job, exited(3, task_attempt=n), NOW, POLICY) or (job, [])
        started = TaskStartedData(job_id=job.id, attempt=0, role="main", index=0, task_attempt=n + 1,
                                  node_id="n1", container_id=f"c-r{n + 1}")
        job, _ = lifecycle.task_started(job, started, NOW) or (job, [])
        assert job.tasks[0].state == TaskState.RUNNING and job.tasks[0].container_id == f"c-r{n + 1}"
    change = lifecycle.task_exited(job, exited(0, task_attempt=2), NOW, POLICY)
    assert change is not None
    job, events = change
    assert job.state == JobState.SUCCEEDED and (job.tasks[0].retries, job.tasks[0].state) == (2, TaskState.SUCCEEDED)
    assert job.retries == 0, "the job itself was never retried"
    assert any(isinstance(e, JobCompleted) for e in events)


def test_fails_three_times_with_two_retries_then_the_job_fails_with_its_exit_code() -> None:
    job = running_job(config(2))
    for n in range(2):
        job, _ = lifecycle.task_exited(job, exited(7, task_attempt=n), NOW, POLICY) or (job, [])
    change = lifecycle.task_exited(job, exited(7, task_attempt=2), NOW, POLICY)
    assert change is not None
    job, events = change
    assert (job.state, job.exit_code, job.tasks[0].state, job.tasks[0].retries) == (JobState.FAILED, 7,
                                                                                      TaskState.FAILED, 2)
    assert [type(e) for e in events] == [JobCompleted], "nothing left to stop: its one task has ended"


def test_a_task_re_run_is_not_a_failure_toward_min_failed() -> None:
    cfg = config(1, tasks=2, minFailedTaskCount=1)
    job, events = lifecycle.task_exited(running_job(cfg), exited(3, index=1), NOW, POLICY) or (None, [])
    assert job is not None and job.state == JobState.RUNNING and [type(e) for e in events] == [RelaunchTask]
    job, events = lifecycle.task_exited(job, exited(3, index=1, task_attempt=1), NOW, POLICY) or (None, [])
    assert job is not None and job.state == JobState.FAILED, "its last failure counts"
    assert [type(e) for e in events] == [JobCompleted, StopTasks] and events[1].routing_key == "node.n1.stop"


def test_a_lost_node_report_names_the_current_run_and_fails_the_task() -> None:
    job, _ = lifecycle.task_exited(running_job(config(2)), exited(3), NOW, POLICY) or (None, [])
    assert job is not None
    change = lifecycle.task_exited(job, exited(-1001, task_attempt=1), NOW, POLICY)
    assert change is not None
    assert change[0].sub_state == SubState.RETRY_PENDING, "the job's policy re-places the attempt elsewhere"


def test_a_new_job_attempt_counts_every_task_again_from_zero() -> None:
    job = running_job(config(1, tasks=1), retries=1, accountable_retries=1)
    job, _ = lifecycle.task_exited(job, exited(-1001, task_attempt=1), NOW, POLICY) or (job, [])
    job, _ = lifecycle.retry_due(job, NOW + 10 ** 7) or (job, [])
    assert job.attempt == 1 and job.tasks[0].retries == 0


def test_an_exit_after_the_attempt_ended_is_no_re_run() -> None:
    job = running_job(config(2)).model_copy(update={"state": JobState.FAILED, "sub_state": SubState.STOPPING})
    change = lifecycle.task_exited(job, exited(3), NOW, POLICY)
    assert change is not None and change[0].tasks[0].state == TaskState.STOPPED and change[1] == []


# --- the launcher's view ------------------------------------------------------------------------------------


def on_run(retries: int) -> JobRecord:
    return running_job(config(2), retries=retries, state=TaskState.WAITING)


@pytest.mark.parametrize(("prompt", "task_attempt", "container", "retries", "action"), [
    (Prompt.LAUNCH, 0, None, 1, Action.SKIP_STALE),  # a late launch of the run that failed
    (Prompt.LAUNCH, 1, None, 1, Action.CLAIM),  # the re-run
    (Prompt.LAUNCH, 2, None, 1, Action.SKIP_STALE),  # a run the job has not asked for
    (Prompt.PASS, 0, ContainerState.RUNNING, 1, Action.STOP),  # a run another has replaced
    (Prompt.PASS, 1, ContainerState.RUNNING, 1, Action.ADOPT),
])
def test_the_launcher_acts_only_on_the_current_run(prompt: Prompt, task_attempt: int,
                                                    container: ContainerState | None, retries: int,
                                                    action: Action) -> None:
    ref = TaskRef(job_id="alice~job1", attempt=0, role="main", index=0, task_attempt=task_attempt)
    assert decide(Seen(prompt=prompt, task=ref, job=on_run(retries), container=container)).action is action

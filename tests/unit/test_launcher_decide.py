"""What the launcher does about one task (services.launcher.decide), as tables over what it sees."""

from __future__ import annotations

from typing import Any

import pytest

from services.launcher.decide import (
    Action,
    ContainerState,
    Decision,
    Prompt,
    RunSeen,
    Seen,
    container_state,
    decide,
    run_seen,
    still_wanted,
    stopped_by_user,
)
from services.launcher.engine.driver import ContainerExit, ContainerInfo
from shared.db.logs import RunPhase, TaskRun
from shared.records import JobRecord, JobState, TaskState
from shared.taskref import TaskRef
from tests.unit.factories import make_job, make_task
from tests.unit.test_pure_cores import IO, _closure

pytestmark = pytest.mark.unit

NOW = 1_800_000_000_000
STALE_MS = 5_000
RUNNING, ENDED, CREATED = ContainerState.RUNNING, ContainerState.ENDED, ContainerState.CREATED


def job(state: JobState = JobState.RUNNING, *, attempt: int = 1, task: TaskState = TaskState.RUNNING,
        stop_requested_by: str | None = None) -> JobRecord:
    made = make_job(state=state, attempt=attempt, tasks=[make_task("main", 0, task, node_id="n1", ip="10.0.0.1")])
    return made.model_copy(update={"stop_requested_by": stop_requested_by})


def run(phase: str, *, ended_ms: int | None = None, exit_code: int | None = None) -> RunSeen:
    return RunSeen.model_validate({"phase": phase, "ended_ms": ended_ms, "exit_code": exit_code})


def seen(prompt: Prompt, the_job: JobRecord | None, *, index: int = 0, **fields: Any) -> Seen:
    task = TaskRef(job_id="alice~job", attempt=1, role="main", index=index)
    values: dict[str, Any] = {"prompt": prompt, "task": task, "job": the_job, "now_ms": NOW,
                              "stale_after_ms": STALE_MS}
    values.update(fields)
    return Seen.model_validate(values)


CURRENT = job()
OVER = job(JobState.SUCCEEDED)
USER_STOPPED = job(JobState.STOPPED, stop_requested_by="alice")
NEXT_ATTEMPT = job(attempt=2)
NEXT_ATTEMPT_USER_STOPPED = job(JobState.STOPPED, attempt=2, stop_requested_by="alice")
WAITING = job(JobState.WAITING, task=TaskState.WAITING)

# --- a launch request: before the run is claimed, then again with the claimed run ---------------

LAUNCH_TABLE: list[tuple[str, Seen, Action]] = [
    ("job gone", seen(Prompt.LAUNCH, None), Action.SKIP_STALE),
    ("job over", seen(Prompt.LAUNCH, OVER), Action.SKIP_STALE),
    ("job on another attempt", seen(Prompt.LAUNCH, NEXT_ATTEMPT), Action.SKIP_STALE),
    ("job over, container running", seen(Prompt.LAUNCH, OVER, container=RUNNING), Action.SKIP_STALE),
    ("container running", seen(Prompt.LAUNCH, CURRENT, container=RUNNING), Action.ADOPT),
    ("container ended", seen(Prompt.LAUNCH, CURRENT, container=ENDED), Action.NOTHING),
    ("no container, run not claimed yet", seen(Prompt.LAUNCH, WAITING), Action.CLAIM),
    ("created container, run not claimed yet", seen(Prompt.LAUNCH, WAITING, container=CREATED), Action.CLAIM),
    ("claimed now", seen(Prompt.LAUNCH, WAITING, run=run("launching")), Action.START),
    ("a start cut short", seen(Prompt.LAUNCH, WAITING, container=CREATED, run=run("running")), Action.START),
    ("already ran", seen(Prompt.LAUNCH, WAITING, run=run("ended", ended_ms=NOW, exit_code=0)), Action.NOTHING),
    ("started once, container gone", seen(Prompt.LAUNCH, WAITING, run=run("running")), Action.REPORT_LOST),
    ("the job shows it running: a launch still starts it", seen(Prompt.LAUNCH, CURRENT, run=run("launching")),
     Action.START),
]


@pytest.mark.parametrize(("case", "facts", "action"), LAUNCH_TABLE, ids=[row[0] for row in LAUNCH_TABLE])
def test_a_launch_request(case: str, facts: Seen, action: Action) -> None:
    assert decide(facts).action is action, case


def test_a_launch_request_for_a_running_container_says_it_started() -> None:
    # even when this process said so before: the command came again because that start may have been lost
    for announced in (False, True):
        assert decide(seen(Prompt.LAUNCH, CURRENT, container=RUNNING, announced=announced)).announce is True


# --- the reconcile pass: a container of this node ------------------------------------------------

CONTAINER_TABLE: list[tuple[str, Seen, Decision]] = [
    ("never started", seen(Prompt.PASS, CURRENT, container=CREATED),
     Decision(action=Action.NOTHING, why="never started: a launch starts it")),
    ("ended", seen(Prompt.PASS, CURRENT, container=ENDED),
     Decision(action=Action.FINISH, why="the task's container ended")),
    ("ended, job gone", seen(Prompt.PASS, None, container=ENDED),
     Decision(action=Action.FINISH, why="the task's container ended")),
    ("running, job gone", seen(Prompt.PASS, None, container=RUNNING),
     Decision(action=Action.STOP, why="its job is over or gone")),
    ("running, job over", seen(Prompt.PASS, OVER, container=RUNNING),
     Decision(action=Action.STOP, why="its job is over or gone")),
    ("running, job stopped by its user", seen(Prompt.PASS, USER_STOPPED, container=RUNNING),
     Decision(action=Action.STOP, why="its job is over or gone", by_user=True)),
    ("running, its attempt replaced", seen(Prompt.PASS, NEXT_ATTEMPT, container=RUNNING),
     Decision(action=Action.STOP, why="its job is over or gone")),
    ("running, the next attempt stopped by its user", seen(Prompt.PASS, NEXT_ATTEMPT_USER_STOPPED, container=RUNNING),
     Decision(action=Action.STOP, why="its job is over or gone")),
    ("running, a user's stop command stopped it", seen(Prompt.PASS, OVER, container=RUNNING, user_stop=True),
     Decision(action=Action.STOP, why="its job is over or gone", by_user=True)),
    ("running, job current, task running", seen(Prompt.PASS, CURRENT, container=RUNNING),
     Decision(action=Action.ADOPT, why="a running container of a current job")),
    ("running, job current, task still waiting", seen(Prompt.PASS, WAITING, container=RUNNING),
     Decision(action=Action.ADOPT, why="a running container of a current job", announce=True)),
    ("running, task still waiting, this process sent its start", seen(Prompt.PASS, WAITING, container=RUNNING,
                                                                        announced=True),
     Decision(action=Action.ADOPT, why="a running container of a current job")),
    ("running, a task the job does not have", seen(Prompt.PASS, WAITING, container=RUNNING, index=7),
     Decision(action=Action.ADOPT, why="a running container of a current job")),
]


@pytest.mark.parametrize(("case", "facts", "decision"), CONTAINER_TABLE, ids=[row[0] for row in CONTAINER_TABLE])
def test_the_pass_over_a_container(case: str, facts: Seen, decision: Decision) -> None:
    assert decide(facts) == decision, case


# --- the reconcile pass: a task placed on this node with no container ----------------------------

LONG_AGO, JUST_NOW = NOW - STALE_MS - 1, NOW - STALE_MS

PLACED_TABLE: list[tuple[str, Seen, Action]] = [
    ("waiting, never launched", seen(Prompt.PASS, WAITING), Action.RELAUNCH),
    ("waiting, claimed but not started", seen(Prompt.PASS, WAITING, run=run("launching")), Action.RELAUNCH),
    ("running, started once, container gone", seen(Prompt.PASS, CURRENT, run=run("running")), Action.RELAUNCH),
    ("running, no run at all", seen(Prompt.PASS, CURRENT), Action.NOTHING),
    ("running, claimed only", seen(Prompt.PASS, CURRENT, run=run("launching")), Action.NOTHING),
    ("ended long ago, the job has not taken it in",
     seen(Prompt.PASS, CURRENT, run=run("ended", ended_ms=LONG_AGO, exit_code=3)), Action.RESEND_EXIT),
    ("ended just now", seen(Prompt.PASS, CURRENT, run=run("ended", ended_ms=JUST_NOW, exit_code=3)), Action.NOTHING),
    ("ended, no exit code stored", seen(Prompt.PASS, CURRENT, run=run("ended", ended_ms=LONG_AGO)), Action.NOTHING),
    ("ended long ago, job over but the task not",
     seen(Prompt.PASS, job(JobState.FAILED), run=run("ended", ended_ms=LONG_AGO, exit_code=3)), Action.RESEND_EXIT),
    ("job over, task waiting", seen(Prompt.PASS, job(JobState.STOPPED, task=TaskState.WAITING)), Action.NOTHING),
    ("task over", seen(Prompt.PASS, job(task=TaskState.SUCCEEDED)), Action.NOTHING),
    ("job gone", seen(Prompt.PASS, None), Action.NOTHING),
]


@pytest.mark.parametrize(("case", "facts", "action"), PLACED_TABLE, ids=[row[0] for row in PLACED_TABLE])
def test_the_pass_over_a_placed_task_without_a_container(case: str, facts: Seen, action: Action) -> None:
    assert decide(facts).action is action, case


# --- a container ended ---------------------------------------------------------------------------

EXIT_TABLE: list[tuple[str, Seen, Decision]] = [
    ("job gone", seen(Prompt.EXIT, None, container=ENDED),
     Decision(action=Action.FORGET, why="a container of a deleted job ended")),
    ("job running", seen(Prompt.EXIT, CURRENT, container=ENDED),
     Decision(action=Action.REPORT_EXIT, why="the task's container ended")),
    ("job stopped by its user", seen(Prompt.EXIT, USER_STOPPED, container=ENDED),
     Decision(action=Action.REPORT_EXIT, why="the task's container ended", by_user=True)),
    ("an older attempt's, the job stopped by its user", seen(Prompt.EXIT, NEXT_ATTEMPT_USER_STOPPED, container=ENDED),
     Decision(action=Action.REPORT_EXIT, why="the task's container ended")),
    ("a user's stop command stopped it", seen(Prompt.EXIT, NEXT_ATTEMPT, container=ENDED, user_stop=True),
     Decision(action=Action.REPORT_EXIT, why="the task's container ended", by_user=True)),
]


@pytest.mark.parametrize(("case", "facts", "decision"), EXIT_TABLE, ids=[row[0] for row in EXIT_TABLE])
def test_an_ended_container(case: str, facts: Seen, decision: Decision) -> None:
    assert decide(facts) == decision, case


# --- the rules and views the table is made of ----------------------------------------------------


@pytest.mark.parametrize(("the_job", "attempt", "user_stop", "by_user"), [
    (None, 1, False, False),
    (None, 1, True, True),
    (CURRENT, 1, False, False),
    (USER_STOPPED, 1, False, True),
    (USER_STOPPED, 0, False, False),
    (NEXT_ATTEMPT_USER_STOPPED, 1, True, True),
])
def test_stopped_by_user(the_job: JobRecord | None, attempt: int, user_stop: bool, by_user: bool) -> None:
    assert stopped_by_user(the_job, attempt, user_stop=user_stop) is by_user


@pytest.mark.parametrize(("the_job", "attempt", "index", "wanted"), [
    (WAITING, 1, 0, True),
    (CURRENT, 1, 0, True),
    (None, 1, 0, False),
    (OVER, 1, 0, False),
    (NEXT_ATTEMPT, 1, 0, False),
    (job(task=TaskState.FAILED), 1, 0, False),
    (CURRENT, 1, 7, False),
])
def test_still_wanted(the_job: JobRecord | None, attempt: int, index: int, wanted: bool) -> None:
    assert still_wanted(the_job, attempt, "main", index) is wanted


@pytest.mark.parametrize(("info", "state"), [
    (None, None),
    (ContainerInfo(id="c", name="n", running=False, status="created"), CREATED),
    (ContainerInfo(id="c", name="n", running=True, status="running"), RUNNING),
    (ContainerInfo(id="c", name="n", running=False, status="exited", exit_code=1), ENDED),
    (ContainerInfo(id="c", name="n", running=False, status="dead"), ENDED),
    (ContainerExit(id="c", labels={}, exit_code=0), ENDED),
])
def test_container_state(info: ContainerInfo | ContainerExit | None, state: ContainerState | None) -> None:
    assert container_state(info) is state


def test_a_stored_run_is_seen_by_its_phase_and_exit() -> None:
    stored = TaskRun.model_validate({"_id": "j/1/main/0", "job_id": "j", "attempt": 1, "role": "main", "index": 0,
                                     "node_id": "n1", "phase": RunPhase.ENDED, "ended_ms": NOW, "exit_code": 3})
    assert run_seen(stored) == run("ended", ended_ms=NOW, exit_code=3)
    assert run_seen(None) is None


@pytest.mark.parametrize("module", ["services.launcher.decide", "services.launcher.engine.tasklabels"])
def test_the_launcher_decisions_stay_pure(module: str) -> None:
    assert {name for name in _closure(module) if name.split(".")[0] in IO} == set()

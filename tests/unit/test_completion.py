"""OpenPAI's completion policy per task role: minFailedTaskCount, minSucceededTaskCount, all done."""

from __future__ import annotations

from typing import Any

import pytest

from shared.jobconfig.model import JobConfig
from shared.lifecycle.completion import Completion, decide_completion
from shared.records import JobState, TaskRecord, TaskState
from tests.unit import seed_configs
from tests.unit.factories import load_seed_config, make_config, make_job, make_task, role_dict

pytestmark = pytest.mark.unit

W, R, S, F, X = TaskState.WAITING, TaskState.RUNNING, TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPED


def tf_config() -> JobConfig:
    """Seed 000's job: 2 ps_server (minFailed 1), 2 worker (minFailed 1, minSucceeded 2)."""
    raw = load_seed_config(seed_configs.TF_EXAMPLE_000)
    return make_config(*raw.pop("taskRoles"), **raw)


def tasks_of(states: dict[str, list[TaskState]], exit_codes: dict[tuple[str, int], int] | None = None,
             ) -> list[TaskRecord]:
    """Tasks from ``{"role": [state of index 0, ...]}``; final tasks complete in listing order."""
    exit_codes = exit_codes or {}
    out, clock = [], 1000
    for role, role_states in states.items():
        for i, state in enumerate(role_states):
            clock += 1
            code = exit_codes.get((role, i), 0 if state == S else 1 if state == F else None)
            out.append(make_task(role, i, state, exit_code=code if state.is_final else None,
                                 completed_ms=clock if state.is_final else None))
    return out


CASES: list[tuple[str, list[dict[str, Any]], dict[str, list[TaskState]], dict[str, Any] | None]] = [
    ("nothing final", [role_dict("main", taskNumber=3)], {"main": [W, R, R]}, None),
    ("all waiting", [role_dict("main", taskNumber=2)], {"main": [W, W]}, None),
    ("some succeeded, others running", [role_dict("main", taskNumber=3)], {"main": [S, S, R]}, None),
    ("all succeeded", [role_dict("main", taskNumber=3)], {"main": [S, S, S]},
     {"state": JobState.SUCCEEDED, "exit_code": 0, "trigger_role": None}),
    ("default minFailed 1: one failure fails the job", [role_dict("main", taskNumber=3)], {"main": [R, F, R]},
     {"state": JobState.FAILED, "exit_code": 1, "trigger_role": "main", "trigger_index": 1}),
    ("minFailed null: failures do not fail the job", [role_dict("main", taskNumber=3, minFailedTaskCount=None)],
     {"main": [F, F, R]}, None),
    ("minFailed null: all done with failures succeeds",
     [role_dict("main", taskNumber=3, minFailedTaskCount=None)], {"main": [F, S, F]},
     {"state": JobState.SUCCEEDED, "exit_code": 0, "trigger_role": None}),
    ("minFailed 2: one failure is not enough", [role_dict("main", taskNumber=3, minFailedTaskCount=2)],
     {"main": [F, R, R]}, None),
    ("minFailed 2: the second failure triggers", [role_dict("main", taskNumber=3, minFailedTaskCount=2)],
     {"main": [F, R, F]}, {"state": JobState.FAILED, "trigger_role": "main", "trigger_index": 2}),
    ("minFailed 2: one failure and the rest succeeded", [role_dict("main", taskNumber=3, minFailedTaskCount=2)],
     {"main": [S, F, S]}, {"state": JobState.SUCCEEDED, "exit_code": 0}),
    ("failures count per role, not over the job",
     [role_dict("a", taskNumber=2, minFailedTaskCount=2), role_dict("b", taskNumber=2, minFailedTaskCount=2)],
     {"a": [F, R], "b": [R, F]}, None),
    ("the failing role's own count decides",
     [role_dict("a", taskNumber=2, minFailedTaskCount=None), role_dict("b", taskNumber=2)],
     {"a": [F, F], "b": [R, F]}, {"state": JobState.FAILED, "trigger_role": "b", "trigger_index": 1}),
    ("minSucceeded 1 of 3", [role_dict("main", taskNumber=3, minSucceededTaskCount=1)], {"main": [R, S, W]},
     {"state": JobState.SUCCEEDED, "exit_code": 0, "trigger_role": "main", "trigger_index": 1}),
    ("stopped tasks count as completed", [role_dict("main", taskNumber=2, minFailedTaskCount=None)],
     {"main": [X, S]}, {"state": JobState.SUCCEEDED}),
]


@pytest.mark.parametrize(("roles", "states", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_policy(roles: list[dict[str, Any]], states: dict[str, list[TaskState]],
                expected: dict[str, Any] | None) -> None:
    job = make_job(make_config(*roles), tasks=tasks_of(states))
    result = decide_completion(job)
    if expected is None:
        assert result is None
        return
    assert isinstance(result, Completion)
    for field, value in expected.items():
        assert getattr(result, field) == value, field


def test_failure_carries_the_triggering_tasks_exit_info() -> None:
    config = make_config(role_dict("main", taskNumber=2))
    job = make_job(config, tasks=[
        make_task("main", 0, R),
        make_task("main", 1, F, exit_code=137, completed_ms=5, reason="killed by SIGKILL", diagnostics="oom?"),
    ])
    result = decide_completion(job)
    assert result is not None
    assert (result.state, result.exit_code, result.trigger_role, result.trigger_index) == (JobState.FAILED, 137,
                                                                                          "main", 1)
    assert result.diagnostics == "oom?"
    assert "main[1]" in result.reason and "137" in result.reason and "killed by SIGKILL" in result.reason


def test_with_several_failures_the_latest_triggers() -> None:
    config = make_config(role_dict("main", taskNumber=3, minFailedTaskCount=2))
    job = make_job(config, tasks=[
        make_task("main", 0, F, exit_code=3, completed_ms=200),
        make_task("main", 1, F, exit_code=4, completed_ms=100),
        make_task("main", 2, R),
    ])
    result = decide_completion(job)
    assert result is not None
    assert (result.state, result.exit_code, result.trigger_index) == (JobState.FAILED, 3, 0)


def test_a_failure_without_exit_code_still_fails_with_a_non_zero_code() -> None:
    job = make_job(make_config(), tasks=[make_task("main", 0, F, exit_code=None)])
    result = decide_completion(job)
    assert result is not None and result.state == JobState.FAILED
    assert result.exit_code != 0


def test_seed_tensorflow_job_succeeds_when_two_workers_succeeded_while_ps_still_run() -> None:
    job = make_job(tf_config(), tasks=tasks_of({"ps_server": [R, R], "worker": [S, S]}))
    result = decide_completion(job)
    assert result is not None
    assert (result.state, result.exit_code, result.trigger_role) == (JobState.SUCCEEDED, 0, "worker")
    assert "minSucceededTaskCount 2" in result.reason


def test_seed_tensorflow_job_one_worker_done_keeps_running() -> None:
    assert decide_completion(make_job(tf_config(), tasks=tasks_of({"ps_server": [R, R], "worker": [S, R]}))) is None


def test_when_both_fire_failed_wins() -> None:
    states = {"ps_server": [F, R], "worker": [S, S]}
    job = make_job(tf_config(), tasks=tasks_of(states, exit_codes={("ps_server", 0): 2}))
    result = decide_completion(job)
    assert result is not None
    assert (result.state, result.exit_code, result.trigger_role, result.trigger_index) == (
        JobState.FAILED, 2, "ps_server", 0)


def test_failed_wins_even_when_the_success_role_comes_first() -> None:
    config = make_config(role_dict("w", taskNumber=2, minSucceededTaskCount=1), role_dict("ps", taskNumber=1))
    job = make_job(config, tasks=tasks_of({"w": [S, R], "ps": [F]}))
    result = decide_completion(job)
    assert result is not None and (result.state, result.trigger_role) == (JobState.FAILED, "ps")


def test_a_job_without_tasks_is_not_complete() -> None:
    assert decide_completion(make_job(make_config(), tasks=[])) is None

"""taskRetryCount in running jobs, in both platform shapes: a task whose runs fail is run again in place (on
the node it holds, with the same PAI_* variables but for FC_TASK_ATTEMPT_ID and its container), up to its
count, before its failure counts; the task's retries show in the v1 and v2 answers; a job that did not ask
for task retries without gang allocation (extras.gangAllocation: false) fails at its first failure, as
OpenPAI v1.8's did."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from services.cli.client import PaiqClient
from tests.infra import EnvSink, Platform, unique, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

STABLE = ("PAI_HOST_IP_main_0", "PAI_CONTAINER_HOST_PORT_LIST", "PAI_TASK_ROLE_INSTANCES", "FC_FRAMEWORK_ATTEMPT_ID",
          "FC_POD_NAME", "PAI_JOB_NAME", "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX")


def job(name: str, commands: list[str], *, task_retry_count: int, gang: bool = False) -> bytes:
    document: dict[str, Any] = {
        "protocolVersion": 2, "name": name, "type": "job",
        "prerequisites": [{"name": "img", "type": "dockerimage", "uri": "local/busybox:latest"}],
        "taskRoles": {"main": {"dockerImage": "img", "taskRetryCount": task_retry_count,
                               "resourcePerInstance": {"cpu": 1, "memoryMB": 128, "gpu": 0}, "commands": commands}},
    }
    if not gang:
        document["extras"] = {"gangAllocation": False}
    return yaml.safe_dump(document, sort_keys=False).encode()


def report(sink: EnvSink) -> str:
    return f"env | nc $PAI_CONTAINER_HOST_IP {sink.port}"


async def test_a_task_that_fails_twice_then_succeeds_ends_succeeded_with_two_retries(
        platform: Platform, api: PaiqClient, user: str) -> None:
    name = unique("taskretry-")
    async with EnvSink() as sink:
        # Each run reports its environment; runs 0 and 1 fail, run 2 (FC_TASK_ATTEMPT_ID) succeeds.
        await api.submit_v2(job(name, [report(sink), 'test "$FC_TASK_ATTEMPT_ID" = 2 || exit 3'],
                                task_retry_count=2))
        detail, seen = await wait_final(api, user, name)
        runs = await sink.wait_for(3)

    status = detail["jobStatus"]
    assert status["state"] == "SUCCEEDED", (seen, status)
    assert status["retries"] == 0, "the job itself was not retried"
    [task] = detail["taskRoles"]["main"]["taskStatuses"]
    assert (task["taskState"], task["containerExitCode"], task["retries"]) == ("SUCCEEDED", 0, 2), task
    assert sorted(r["FC_TASK_ATTEMPT_ID"] for r in runs) == ["0", "1", "2"]
    for variable in STABLE:  # the same task on the same node: its placement and environment kept
        assert len({r[variable] for r in runs}) == 1, variable
    assert len({r["PAI_CONTAINER_ID"] for r in runs}) == 3, "each run is a container of its own"

    v2 = await api.v2_job(user, name)
    [v2_task] = v2["taskRoles"]["main"]["taskStatuses"]
    assert (v2_task["taskState"], v2_task["retries"], v2_task["accountableRetries"]) == ("SUCCEEDED", 2, 2)


async def test_a_task_that_fails_three_times_with_two_retries_fails_the_job_with_its_exit_code(
        platform: Platform, api: PaiqClient, user: str) -> None:
    name = unique("taskretry-")
    async with EnvSink() as sink:
        await api.submit_v2(job(name, [report(sink), "echo run $FC_TASK_ATTEMPT_ID failing >&2", "exit 7"],
                                task_retry_count=2))
        detail, seen = await wait_final(api, user, name)
        runs = await sink.wait_for(3)

    status = detail["jobStatus"]
    assert (status["state"], status["appExitCode"], status["retries"]) == ("FAILED", 7, 0), (seen, status)
    [task] = detail["taskRoles"]["main"]["taskStatuses"]
    assert (task["taskState"], task["containerExitCode"], task["retries"]) == ("FAILED", 7, 2), task
    assert "run 2 failing" in task["containerExitDiagnostics"]
    assert len(runs) == 3
    log = [line async for line in api.task_log(user, name, "main", 0)]
    assert any("run 2 failing" in line for line in log) and not any("run 0" in line for line in log), \
        "the log shown is the task's last run's"


async def test_with_gang_allocation_task_retry_count_is_not_honoured_as_in_openpai(
        platform: Platform, api: PaiqClient, user: str) -> None:
    name = unique("taskretry-")
    await api.submit_v2(job(name, ["exit 5"], task_retry_count=2, gang=True))
    detail, seen = await wait_final(api, user, name)
    [task] = detail["taskRoles"]["main"]["taskStatuses"]
    assert (detail["jobStatus"]["state"], task["retries"], task["containerExitCode"]) == ("FAILED", 0, 5), seen

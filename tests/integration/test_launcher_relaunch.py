"""A task re-run in place (taskRetryCount) as the launcher carries it out against the real engine and store:
the status service's node.<id>.relaunch, delivered twice, starts run 1 once, in a container of its own named
and labelled for that run, with FC_TASK_ATTEMPT_ID; and a relaunch command that was lost is made up for by the
reconcile pass, which finds the task waiting on this node for a run that has no container."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from shared.events import RelaunchTask, RelaunchTaskData, TaskExited, TaskStarted
from shared.records import JobRecord, TaskState
from shared.tasks.launchspec import ref_container_name
from tests.integration.launcher_harness import Harness, harness, running_launcher

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


async def waiting_for_run_1(h: Harness, name: str, command: str) -> JobRecord:
    """A job whose one task's run 0 failed and is to run again (as the status service leaves it)."""
    job, _ = await h.job(name, command=command)
    task = job.tasks[0].model_copy(update={"state": TaskState.WAITING, "retries": 1, "accountable_retries": 1})
    again = job.model_copy(update={"tasks": (task,)})
    assert await h.store.replace_job(again, job.version)
    stored = await h.store.get_job(job.id)
    assert stored is not None
    return stored


async def test_a_relaunch_delivered_twice_starts_the_next_run_once(
        tmp_path: Path, mongo_uri: str, docker_client: docker.DockerClient) -> None:
    async with harness(tmp_path, mongo_uri, docker_client, PAIQ_RETRY_BACKOFF_MS="100",
                       PAIQ_RECONCILE_SECONDS="3600") as h, running_launcher(h.settings, h.store, h.bus):
        job = await waiting_for_run_1(h, "rerun", "echo run $FC_TASK_ATTEMPT_ID; sleep 1")
        command = RelaunchTask(subject=job.id, data=RelaunchTaskData(
            job_id=job.id, attempt=0, role="main", index=0, task_attempt=1, node_id=h.node_id, reason="exit 3"))
        await h.bus.publish([command, command.model_copy(update={"id": "again"})])
        first = await h.wait_for(TaskStarted, lambda e: e.subject == job.id)
        attrs = docker_client.api.inspect_container(first.data.container_id)  # while it runs (removed after)
        exited = await h.wait_for(TaskExited, lambda e: e.subject == job.id)
        started = h.of(TaskStarted, job.id)
        assert {e.data.task_attempt for e in started} == {1} and exited.data.task_attempt == 1
        assert len({e.data.container_id for e in started}) == 1, "one container (a second command joins the first)"
        ref = h.key(job).model_copy(update={"task_attempt": 1})
        assert attrs["Name"].lstrip("/") == ref_container_name(ref) != ref_container_name(h.key(job))
        assert attrs["Config"]["Labels"]["paiq.task_attempt"] == "1"
        assert "FC_TASK_ATTEMPT_ID=1" not in attrs["Config"]["Env"], "a v1 job has no v1.x variables"
        run = await h.logs.get_run(ref)
        assert run is not None and run.exit_code == 0 and run.id.endswith("/main/0/1")
        assert await h.logs.get_run(h.key(job)) is None, "run 0's record is another's (never claimed here)"


async def test_a_lost_relaunch_is_made_up_for_by_the_reconcile_pass(
        tmp_path: Path, mongo_uri: str, docker_client: docker.DockerClient) -> None:
    async with harness(tmp_path, mongo_uri, docker_client, PAIQ_RETRY_BACKOFF_MS="100") as h:
        job = await waiting_for_run_1(h, "lostrerun", "echo ran")
        async with running_launcher(h.settings, h.store, h.bus):  # its first pass finds the task waiting
            exited = await h.wait_for(TaskExited, lambda e: e.subject == job.id)
        assert (exited.data.task_attempt, exited.data.exit_code) == (1, 0)
        assert [e.data.task_attempt for e in h.of(TaskStarted, job.id)] == [1]

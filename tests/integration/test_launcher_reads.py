"""What a launcher asks of the database and the engine, against the real ones: a reconcile pass reads the jobs of its
node's running tasks in one query and the runs of its tasks without a container in one more; an image's sshd
is looked for once, not per task."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import docker
import pytest
from pymongo import AsyncMongoClient

from services.launcher.container.sshsetup import NO_SSHD
from services.launcher.engine.docker_driver import DockerDriver
from services.launcher.reconcile import reconcile
from services.submit.routes.ssh import new_job_key
from shared.db.logs import LogStore
from shared.db.store import Store
from shared.events import TaskExited, TaskProgress, TaskStarted
from shared.jobconfig.sealing import new_key
from tests.dbcommands import CommandCounts
from tests.integration.launcher_harness import Harness, harness, running_launcher

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


@pytest.fixture
async def h(tmp_path: Path, mongo_uri: str, docker_client: docker.DockerClient) -> AsyncIterator[Harness]:
    async with harness(tmp_path, mongo_uri, docker_client) as h, running_launcher(h.settings, h.store, h.bus) as deps:
        h.deps = deps
        yield h


async def test_a_reconcile_pass_reads_the_jobs_of_running_tasks_in_one_query(h: Harness, mongo_uri: str) -> None:
    """Found false: each pass read each running container's job on its own (a find per task every
    PAIQ_RECONCILE_SECONDS: most of an idle node's database reads)."""
    jobs = [await h.job(f"quiet{i}", command="sleep 60") for i in range(6)]
    for job, specs in jobs:
        await h.launch(job, specs)
    for job, _ in jobs:
        await h.wait_for(TaskStarted, lambda e, job_id=job.id: e.subject == job_id)
    counts = CommandCounts()
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(mongo_uri, event_listeners=[counts])
    try:
        assert h.deps is not None
        await reconcile(dataclasses.replace(h.deps, store=Store(client, h.settings.database)))
    finally:
        await client.close()
    assert counts.sent["find"] == 1, counts.sent  # the jobs holding resources on this node; nothing else
    assert not h.of(TaskExited, jobs[0][0].id), "the pass left the running tasks alone"


async def test_a_reconcile_pass_reads_the_runs_of_tasks_without_containers_in_one_query(
        h: Harness, mongo_uri: str) -> None:
    """Four placed tasks that no launch reached (a lost message): the pass reads their runs together, then
    launches each. Found false: a find of a run per task."""
    jobs = [await h.job(f"lost{i}", command="true") for i in range(4)]
    counts = CommandCounts()
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(mongo_uri, event_listeners=[counts])
    try:
        assert h.deps is not None
        store = Store(client, h.settings.database)
        await reconcile(dataclasses.replace(h.deps, store=store, logs=LogStore(store.jobs.database)))
        assert counts.sent["find"] == 2, counts.sent  # the jobs holding resources here, then the runs
        for job, _ in jobs:
            await h.exited(job)  # launched by the pass, ran, ended
    finally:
        await client.close()


class StatCountingDriver(DockerDriver):
    """The real driver, counting the look-ups of files in containers (the sshd check's stats)."""

    lookups = 0

    async def first_file(self, container_id: str, paths: tuple[str, ...]) -> str | None:
        self.lookups += 1
        return await super().first_file(container_id, paths)


async def test_an_images_sshd_is_looked_for_once_and_each_task_told_it_has_none(
        tmp_path: Path, mongo_uri: str, docker_client: docker.DockerClient) -> None:
    """Four SSH-enabled tasks of busybox (no sshd): each task's message says so; the image was looked into
    once (up to four stats of a container each: found false, a look-up per task)."""
    async with harness(tmp_path, mongo_uri, docker_client, PAIQ_SECRETS_KEY=new_key()) as h:
        driver = StatCountingDriver.from_url(None)
        async with running_launcher(h.settings, h.store, h.bus, driver=driver):
            jobs = [await h.job(f"nosshd{i}", command="sleep 2") for i in range(4)]
            for job, _ in jobs:
                assert h.settings.secrets_key is not None
                await h.store.put_job_key(new_job_key(job, ()).sealed(h.settings.secrets_key))
            await h.launch(*jobs[0])  # the first alone: the others find the image looked into
            await h.wait_for(TaskProgress, lambda e: e.subject == jobs[0][0].id and e.data.detail == NO_SSHD)
            for job, specs in jobs[1:]:
                await h.launch(job, specs)
            for job, _ in jobs:
                await h.wait_for(TaskProgress,
                                 lambda e, job_id=job.id: e.subject == job_id and e.data.detail == NO_SSHD)
                assert (await h.exited(job)).data.exit_code == 0
        assert isinstance(driver, StatCountingDriver) and driver.lookups == 1

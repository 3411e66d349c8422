"""The launcher service against the real Docker engine and MongoDB-wire server (in-process bus).

Idempotent launches, logs that outlive containers, codeDir, memory, exit codes, stops, isDebug and
restarts: each test stores a job placed on its own node, tells the launcher to launch it, and looks
at what the engine ran and what the launcher reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path

import aio_pika
import docker
import pytest

from services.launcher.engine.docker_driver import DockerDriver
from services.launcher.engine.driver import ContainerSpec, RegistryAuth
from services.launcher.service import on_launch
from services.launcher.stopping import stop_job_containers
from shared.bus.base import Router
from shared.db.embedded import free_port
from shared.db.logs import RunPhase
from shared.errors import BusError
from shared.events import CloudEvent, LaunchTasks, LaunchTasksData, TaskExited, TaskProgress, TaskStarted
from shared.ops.metrics import EVENTS_HANDLED
from shared.records import TaskSubState, now_ms
from shared.runtime.service import open_bus
from tests.infra import rabbitmqctl, unique
from tests.integration.launcher_harness import Harness, harness, running_launcher

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


@pytest.fixture
async def h(tmp_path: Path, mongo_uri: str, docker_client: docker.DockerClient) -> AsyncIterator[Harness]:
    async with harness(tmp_path, mongo_uri, docker_client, PAIQ_DEBUG_KEEP_SECONDS="3") as h, \
            running_launcher(h.settings, h.store, h.bus) as deps:
        h.deps = deps
        yield h


def node_containers(docker_client: docker.DockerClient, node_id: str) -> list[str]:
    return [c["Id"] for c in docker_client.api.containers(all=True, filters={"label": f"paiq.node={node_id}"})]


async def all_removed(docker_client: docker.DockerClient, node_id: str, limit_s: float = 10) -> list[str]:
    """The node's containers once none is left, or as they are after ``limit_s`` (the exit is reported
    before the container is removed)."""
    for _ in range(int(limit_s * 10)):
        if not node_containers(docker_client, node_id):
            break
        await asyncio.sleep(0.1)
    return node_containers(docker_client, node_id)


async def test_a_launch_delivered_twice_starts_one_container(h: Harness, docker_client: docker.DockerClient) -> None:
    job, specs = await h.job("twice", command="sleep 2")
    await h.launch(job, specs)
    await h.launch(job, specs)  # a redelivery while the first is in flight
    await h.wait_for(TaskStarted, lambda e: e.subject == job.id)
    await h.launch(job, specs)  # and one after it started
    await h.bus.drained()  # every launch handled
    started = h.of(TaskStarted, job.id)
    assert len({e.data.container_id for e in started}) == 1, started
    assert len(node_containers(docker_client, h.node_id)) == 1
    exited = await h.exited(job)
    assert exited.data.exit_code == 0 and exited.data.container_id == started[0].data.container_id
    assert await all_removed(docker_client, h.node_id) == [], "removed once its log was saved"
    await h.launch(job, specs)  # a replay long after: the task ran already, it must not run again
    await h.bus.drained()
    assert node_containers(docker_client, h.node_id) == []
    assert len({e.data.container_id for e in h.of(TaskStarted, job.id)}) == 1


async def test_logs_outlive_the_container_with_both_streams_in_order(
        h: Harness, docker_client: docker.DockerClient) -> None:
    job, specs = await h.job("logs", command="echo out1; sleep 0.1; echo err1 >&2; sleep 0.1; echo out2; sleep 0.1; "
                                             "echo err2 >&2")
    await h.launch(job, specs)
    exited = await h.exited(job)
    assert exited.data.exit_code == 0
    assert exited.data.container_id is not None
    assert await all_removed(docker_client, h.node_id) == []
    run = await h.logs.get_run(h.key(job))
    assert run is not None and run.phase is RunPhase.ENDED and run.log_complete and not run.log_truncated
    assert await h.log_text(job) == "out1\nerr1\nout2\nerr2\n"
    assert await h.log_text(job, streams=frozenset({"stdout"})) == "out1\nout2\n"
    lines, _ = await h.logs.tail(h.key(job), 2, frozenset({"stdout", "stderr"}))
    assert [ln.text for ln in lines] == ["out2\n", "err2\n"]
    await h.store.delete_job(job.id)
    assert await h.log_text(job) == "" and await h.logs.get_run(h.key(job)) is None, "deleted with its job"


async def test_a_log_is_capped_and_the_cap_is_said(tmp_path: Path, mongo_uri: str,
                                                   docker_client: docker.DockerClient) -> None:
    async with harness(tmp_path, mongo_uri, docker_client, PAIQ_TASK_LOG_MAX_BYTES="1000") as h, \
            running_launcher(h.settings, h.store, h.bus):
        job, specs = await h.job("chatty", command="seq 1 2000 | sed 's/^/line-/'")
        await h.launch(job, specs)
        assert (await h.exited(job)).data.exit_code == 0
        text = await h.log_text(job)
        run = await h.logs.get_run(h.key(job))
    kept, notice = text.rsplit("line-", 1)[0], text.splitlines()[-1]
    assert text.startswith("line-1\nline-2\n")
    assert len(kept.encode()) <= 1000
    assert notice == ("[paiq] log truncated: this task wrote more than 1000 bytes; later output is not kept "
                      "(PAIQ_TASK_LOG_MAX_BYTES)")
    assert run is not None and run.log_truncated and run.log_complete


async def test_code_dir_is_read_only_at_pai_code(h: Harness) -> None:
    code = h.fs / "code" / "tester" / "mounted"
    code.mkdir(parents=True)
    (code / "main.sh").write_text("echo code-ok\n")
    job, specs = await h.job(
        "mounted", codeDir="$PAI_DEFAULT_FS_URI/code/$PAI_USER_NAME/$PAI_JOB_NAME",
        command="sh /pai/code/main.sh; (echo x > /pai/code/new) 2>/dev/null && echo WRITABLE || echo read-only; "
                "grep ' /pai/code ' /proc/mounts | cut -d' ' -f4 | cut -d, -f1")
    await h.launch(job, specs)
    assert (await h.exited(job)).data.exit_code == 0
    assert await h.log_text(job) == "code-ok\nread-only\nro\n"
    assert not (code / "new").exists()


@pytest.mark.parametrize(("code_dir", "says"), [
    ("$PAI_DEFAULT_FS_URI/../outside", "'..' is not allowed"),
    ("$PAI_DEFAULT_FS_URI/code/../../outside", "'..' is not allowed"),
    ("/etc", "outside the default file system"),
    ("file:///var/run/docker.sock", "outside the default file system"),
    ("$PAI_DEFAULT_FS_URI/link-to-etc", "leads outside the default file system (through a symbolic link)"),
    ("$PAI_DEFAULT_FS_URI/code/missing", "does not exist"),
])
async def test_code_dir_escapes_are_refused_and_nothing_runs(
        h: Harness, docker_client: docker.DockerClient, code_dir: str, says: str) -> None:
    os.symlink("/etc", h.fs / "link-to-etc")
    job, specs = await h.job(unique("escape"), codeDir=code_dir, command="cat /pai/code/passwd")
    await h.launch(job, specs)
    exited = await h.exited(job)
    assert exited.data.exit_code == -1100
    assert says in exited.data.reason
    assert h.of(TaskStarted, job.id) == []
    assert node_containers(docker_client, h.node_id) == []


async def test_a_code_dir_over_the_cap_is_refused(tmp_path: Path, mongo_uri: str,
                                                  docker_client: docker.DockerClient) -> None:
    async with harness(tmp_path, mongo_uri, docker_client, PAIQ_CODE_DIR_MAX_MB="1") as h, \
            running_launcher(h.settings, h.store, h.bus):
        big = h.fs / "big"
        big.mkdir()
        (big / "weights.bin").write_bytes(b"\0" * (1024 * 1024 + 1))
        job, specs = await h.job("big", codeDir="$PAI_DEFAULT_FS_URI/big")
        await h.launch(job, specs)
        exited = await h.exited(job)
    assert exited.data.exit_code == -1100
    assert "larger than 1 MB" in exited.data.reason


async def test_past_its_memory_a_task_ends_with_minus_1200_and_shm_is_sized(h: Harness) -> None:
    job, specs = await h.job("oom", roles=[{
        "name": "main", "memoryMB": 128, "shmMB": 32,
        "command": "df -m /dev/shm | tail -1; head -c 400m /dev/zero | tail > /dev/null"}])
    await h.launch(job, specs)
    exited = await h.exited(job)
    assert exited.data.exit_code == -1200
    assert exited.data.reason == "out of memory (limit 128 MB)"
    shm = (await h.log_text(job, streams=frozenset({"stdout"}))).split()
    assert shm[1] == "32" and shm[-1] == "/dev/shm"


@pytest.mark.parametrize(("command", "code", "says"), [
    ("trainn --epochs 3", -1203, "command not found (the shell exited 127): /bin/sh: trainn: not found"),
    ("echo 'echo hi' > /tmp/run.sh; /tmp/run.sh", -1202, "command not executable (the shell exited 126)"),
    ("echo about to fail >&2; exit 3", 3, "command exited with code 3"),
])
async def test_shell_codes_become_openpai_codes(h: Harness, command: str, code: int, says: str) -> None:
    job, specs = await h.job(unique("codes"), command=command)
    await h.launch(job, specs)
    exited = await h.exited(job)
    assert exited.data.exit_code == code
    assert exited.data.reason.startswith(says)
    if code == 3:
        assert exited.data.diagnostics == "about to fail\n", "the last stderr lines go with the exit"


async def test_a_task_stopped_for_its_user_reports_minus_210(h: Harness) -> None:
    assert h.deps is not None
    job, specs = await h.job("stopped", command="sleep 60")
    await h.launch(job, specs)
    await h.wait_for(TaskStarted, lambda e: e.subject == job.id)
    begun = asyncio.get_running_loop().time()
    assert await stop_job_containers(h.deps, job.id, by_user=True) == 1
    exited = await h.exited(job)
    assert (exited.data.exit_code, exited.data.reason) == (-210, "stopped by user")
    assert asyncio.get_running_loop().time() - begun < 10


async def test_isdebug_keeps_a_failed_container_for_its_reservation_then_cleans_up(
        h: Harness, docker_client: docker.DockerClient) -> None:
    job, specs = await h.job("debugged", command="echo bye; exit 3", jobEnvs={"isDebug": True})
    await h.launch(job, specs)
    kept = await h.wait_for(TaskProgress, lambda e: e.subject == job.id and e.data.kept_until_ms is not None)
    assert kept.data.sub_state == TaskSubState.KEPT
    assert kept.data.kept_until_ms is not None and 1000 < kept.data.kept_until_ms - now_ms() <= 3500
    assert "exited with code 3" in kept.data.detail
    [container] = docker_client.containers.list(filters={"label": f"paiq.node={h.node_id}"})
    assert container.status == "running", "kept running, with its resources, to be entered"
    probe = container.exec_run(["/bin/sh", "-c", "echo $PAI_JOB_NAME"])
    assert probe.output.decode().strip() == "debugged"
    assert h.of(TaskExited, job.id) == [], "not reported while kept"
    exited = await h.exited(job, limit_s=15)
    assert exited.data.exit_code == 3
    assert await all_removed(docker_client, h.node_id) == []


async def test_an_isdebug_task_that_succeeds_is_not_kept(h: Harness) -> None:
    job, specs = await h.job("debug-ok", command="echo fine", jobEnvs={"isDebug": True})
    await h.launch(job, specs)
    exited = await h.exited(job, limit_s=10)
    assert exited.data.exit_code == 0
    progress = [p.data.sub_state for p in h.of(TaskProgress, job.id)]
    assert progress == [TaskSubState.PULLING], "refreshing latest; not kept"


class SlowToResumeDriver(DockerDriver):
    """The real driver, whose ``run`` returns only 2.5 s after the engine started the container: the window in
    which a loaded launcher's reconcile pass (every second here) sees a running container its launch has not yet
    recorded."""

    async def run(self, spec: ContainerSpec) -> str:
        container_id = await super().run(spec)
        await asyncio.sleep(2.5)
        return container_id


async def test_a_pass_during_a_launch_leaves_its_start_to_the_launch(
        tmp_path: Path, mongo_uri: str, docker_client: docker.DockerClient) -> None:
    """A pass that ran while a launch was in flight adopted its container and said its start, and the launch
    said it again (seen in full runs on a loaded machine): the start is said once, by the launch."""
    async with harness(tmp_path, mongo_uri, docker_client) as h:
        job, specs = await h.job("window", command="sleep 6")
        async with running_launcher(h.settings, h.store, h.bus, driver=SlowToResumeDriver.from_url(None)):
            await h.launch(job, specs)
            await h.wait_for(TaskStarted, lambda e: e.subject == job.id)
            await asyncio.sleep(2)  # passes after the launch: they find it said
            await h.exited(job)
        assert len(h.of(TaskStarted, job.id)) == 1, [e.data for e in h.of(TaskStarted, job.id)]


async def test_a_restarted_launcher_adopts_running_containers_and_reports_missed_exits(
        tmp_path: Path, mongo_uri: str, docker_client: docker.DockerClient) -> None:
    async with harness(tmp_path, mongo_uri, docker_client) as h:
        running, running_specs = await h.job("three", roles=[{
            "name": "main", "taskNumber": 3, "memoryMB": 128,
            "command": "echo start-$PAI_TASK_INDEX; sleep 4; echo done-$PAI_TASK_INDEX"}])
        quick, quick_specs = await h.job("quick", command="sleep 1; echo finished; exit 4")
        async with running_launcher(h.settings, h.store, h.bus):
            await h.launch(running, running_specs)
            await h.launch(quick, quick_specs)
            for i in range(3):
                await h.wait_for(TaskStarted, lambda e, i=i: e.subject == running.id and e.data.index == i)
            await h.wait_for(TaskStarted, lambda e: e.subject == quick.id)
        # The launcher is gone (its containers are not): "quick" ends while nobody watches.
        before = {e.data.index: e.data.container_id for e in h.of(TaskStarted, running.id)}
        quick_id = h.of(TaskStarted, quick.id)[0].data.container_id
        for _ in range(100):  # "quick" ends (after its 1 s) with nobody to see it
            if docker_client.containers.get(quick_id).status == "exited":
                break
            await asyncio.sleep(0.1)
        assert docker_client.containers.get(quick_id).status == "exited"
        assert h.of(TaskExited, quick.id) == []
        assert sorted(node_containers(docker_client, h.node_id)) == sorted([*before.values(), quick_id])
        assert all(docker_client.containers.get(c).status == "running" for c in before.values())
        async with running_launcher(h.settings, h.store, h.bus):
            missed = await h.exited(quick)
            assert missed.data.exit_code == 4
            exits = [await h.exited(running, index=i) for i in range(3)]
            assert await all_removed(docker_client, h.node_id) == []
        assert all(e.data.exit_code == 0 for e in exits)
        assert {e.data.index: e.data.container_id for e in exits} == before, "the same containers ran on"
        assert {e.data.container_id for e in h.of(TaskStarted, running.id)} == set(before.values())
        # Each launcher said each start once (the job here shows its tasks waiting all along: no status
        # service takes the starts in), however many passes ran over the running containers.
        assert sorted(e.data.index for e in h.of(TaskStarted, running.id)) == [0, 0, 1, 1, 2, 2]
        for i in range(3):
            assert await h.log_text(running, index=i) == f"start-{i}\ndone-{i}\n"
        assert await h.log_text(quick) == "finished\n"


async def test_the_pass_does_not_say_again_a_start_this_launcher_said(h: Harness) -> None:
    # The job shows its task waiting until the status service takes the start in; the passes meanwhile
    # (one a second here) must not send task.started again.
    job, specs = await h.job("said-once", command="sleep 3")
    await h.launch(job, specs)
    exited = await h.exited(job, limit_s=15)
    assert exited.data.exit_code == 0
    assert len(h.of(TaskStarted, job.id)) == 1


async def test_a_start_whose_publish_failed_is_said_by_the_next_pass(h: Harness) -> None:
    publish, failed = h.bus.publish, []

    async def broker_down_for_the_first_start(events: Sequence[CloudEvent]) -> None:
        if not failed and any(isinstance(e, TaskStarted) for e in events):
            failed.append(events)
            raise BusError("the broker is away")
        await publish(events)

    h.bus.publish = broker_down_for_the_first_start  # type: ignore[method-assign]
    job, specs = await h.job("said-later", command="sleep 3")
    await h.launch(job, specs)
    exited = await h.exited(job, limit_s=15)
    assert failed and exited.data.exit_code == 0
    started = h.of(TaskStarted, job.id)
    assert len(started) == 1 and started[0].data.container_id == exited.data.container_id
    assert started[0].id != failed[0][0].id, "said again by the pass, as a new event"


async def test_a_placed_task_without_a_container_is_launched_by_reconcile_once(
        tmp_path: Path, mongo_uri: str, docker_client: docker.DockerClient) -> None:
    async with harness(tmp_path, mongo_uri, docker_client) as h:
        job, _ = await h.job("orphan", command="echo ran")  # placed; its launch message was lost
        async with running_launcher(h.settings, h.store, h.bus):
            exited = await h.exited(job)
            # A later reconcile pass, the job still showing the task waiting, reports the exit again
            # (the stored run) and must not launch it again.
            await h.wait_for(TaskExited, lambda e: e.subject == job.id and e is not exited)
        assert exited.data.exit_code == 0
        assert len({e.data.container_id for e in h.of(TaskStarted, job.id)}) == 1, "launched once, never again"
        assert await h.log_text(job) == "ran\n"
        assert len(h.of(TaskExited, job.id)) >= 2, "the exit is reported again while the job has not taken it"


async def test_bridge_networking_publishes_task_ports_one_to_one_on_the_nodes_address(
        tmp_path: Path, mongo_uri: str, docker_client: docker.DockerClient) -> None:
    port = free_port()
    async with harness(tmp_path, mongo_uri, docker_client) as h, \
            running_launcher(h.settings, h.store, h.bus) as deps:
        job, specs = await h.job("bridged", roles=[{
            "name": "main", "memoryMB": 128, "portList": [{"label": "http", "beginAt": port, "portNumber": 1}],
            "command": "echo hello-from-bridge | nc -l -p $PAI_CONTAINER_HOST_http_PORT_LIST"}])
        await h.launch(job, specs)
        started = await h.wait_for(TaskStarted, lambda e: e.subject == job.id)
        attrs = docker_client.api.inspect_container(started.data.container_id)
        assert attrs["HostConfig"]["NetworkMode"] == "paiq-tasks"  # bridge networking is the default
        gateway = docker_client.api.inspect_network("paiq-tasks")["IPAM"]["Config"][0]["Gateway"]
        assert deps.address == gateway, "the node's address is the task network's gateway when none is given"
        assert attrs["HostConfig"]["PortBindings"][f"{port}/tcp"] == [{"HostIp": gateway, "HostPort": str(port)}]
        received = b""
        for _ in range(50):
            try:
                reader, writer = await asyncio.open_connection(gateway, port)
                received = await asyncio.wait_for(reader.read(), 5)
                writer.close()
                if received:
                    break
            except OSError:
                pass
            await asyncio.sleep(0.1)
        assert received == b"hello-from-bridge\n"
        assert (await h.exited(job)).data.exit_code == 0


class CountingDriver(DockerDriver):
    """The real driver, counting the pulls it is asked for and how often an image was found absent."""

    pulls = 0
    absent = 0

    async def pull(self, image: str, auth: RegistryAuth | None) -> None:
        self.pulls += 1
        await super().pull(image, auth)

    async def image_id(self, image: str) -> str | None:
        found = await super().image_id(image)
        self.absent += found is None
        return found


async def test_tasks_needing_one_absent_image_share_one_pull_and_say_so(
        tmp_path: Path, mongo_uri: str, docker_client: docker.DockerClient) -> None:
    from tests.infra import push_image, run_registry

    with run_registry(tmp_path / "registry") as registry:
        image = registry.image(f"paiq/{unique('shared')}:1")
        push_image(docker_client, "local/busybox:latest", image)
        async with harness(tmp_path, mongo_uri, docker_client) as h:
            driver = CountingDriver.from_url(None)
            async with running_launcher(h.settings, h.store, h.bus, driver=driver):
                job, specs = await h.job("pulled", image=image, roles=[
                    {"name": "main", "taskNumber": 3, "memoryMB": 128, "command": "true"}])
                await h.launch(job, specs)
                exits = [await h.exited(job, index=i) for i in range(3)]
            assert [e.data.exit_code for e in exits] == [0, 0, 0]
            assert isinstance(driver, CountingDriver) and driver.pulls == 1
            pulling = h.of(TaskProgress, job.id)
            # Each task that found the image absent waited on the one pull and said so; on a loaded machine a task
            # may look only once the pull is done, find the image and say nothing (a full run saw two of three).
            assert driver.absent >= 1 and len(pulling) == driver.absent
            assert len({p.data.index for p in pulling}) == len(pulling)
            assert {(p.data.sub_state, p.data.detail) for p in pulling} == {(TaskSubState.PULLING, image)}
        docker_client.images.remove(image)


async def test_a_latest_image_is_refreshed_and_the_local_copy_used_when_the_registry_is_unreachable(
        tmp_path: Path, mongo_uri: str, docker_client: docker.DockerClient) -> None:
    async with harness(tmp_path, mongo_uri, docker_client) as h:
        driver = CountingDriver.from_url(None)
        async with running_launcher(h.settings, h.store, h.bus, driver=driver):
            job, specs = await h.job("latest", command="true")  # local/busybox:latest: no registry has it
            await h.launch(job, specs)
            assert (await h.exited(job)).data.exit_code == 0
        assert isinstance(driver, CountingDriver) and driver.pulls == 1


async def until(condition: Callable[[], bool], what: str, limit_s: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + limit_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"not within {limit_s} s: {what}"
        await asyncio.sleep(0.05)


class SlowPullDriver(DockerDriver):
    """The real driver, whose pulls wait until the test lets them go (a registry far away)."""

    release: asyncio.Event | None = None
    pulls = 0

    async def pull(self, image: str, auth: RegistryAuth | None) -> None:
        self.pulls += 1
        assert self.release is not None
        await self.release.wait()
        await super().pull(image, auth)


async def test_a_launch_is_acked_before_its_pull_and_a_redelivery_meanwhile_starts_one_container(
        tmp_path: Path, mongo_uri: str, docker_client: docker.DockerClient) -> None:
    async with harness(tmp_path, mongo_uri, docker_client) as h:
        driver = SlowPullDriver.from_url(None)
        assert isinstance(driver, SlowPullDriver)
        driver.release = asyncio.Event()
        async with running_launcher(h.settings, h.store, h.bus, driver=driver) as deps:
            job, specs = await h.job("slow-pull", command="true")  # local/busybox:latest is refreshed: a pull
            message = LaunchTasks(subject=job.id, data=LaunchTasksData(
                job_id=job.id, attempt=job.attempt, node_id=h.node_id, tasks=tuple(specs)))
            # The handler returns (so the bus acks the message) while the pull still waits: a pull longer
            # than the broker's consumer timeout can no longer break the channel.
            assert await asyncio.wait_for(on_launch(message, deps), 1.0) == []
            await until(lambda: driver.pulls == 1, "the pull started")
            assert not h.of(TaskStarted, job.id), "pulling, nothing started yet"
            assert await asyncio.wait_for(on_launch(message, deps), 1.0) == []  # redelivered meanwhile
            driver.release.set()
            assert (await h.exited(job)).data.exit_code == 0
            await until(lambda: not deps.work.launches.tasks(), "both deliveries' launch is over")
        assert len({e.data.container_id for e in h.of(TaskStarted, job.id)}) == 1
        assert driver.pulls == 1, "the second delivery joined the launch in flight"


@contextlib.contextmanager
def rabbitmq_consumer_timeout(ms: int) -> Iterator[None]:
    """Lower the broker's consumer timeout (a delivery unacked for longer closes its channel) and check it
    every 0.5 s instead of every minute, for channels opened meanwhile; restored afterwards."""
    def set_env(key: str, value: int) -> None:
        rabbitmqctl("eval", f"application:set_env(rabbit, {key}, {value}).")

    set_env("consumer_timeout", ms)
    set_env("channel_tick_interval", 500)
    try:
        yield
    finally:
        set_env("consumer_timeout", 1_800_000)
        set_env("channel_tick_interval", 60_000)


async def test_a_pull_longer_than_rabbitmqs_consumer_timeout_still_starts_one_container(
        tmp_path: Path, mongo_uri: str, amqp_url: str, docker_client: docker.DockerClient) -> None:
    prefix = unique("ctimeout-")
    with rabbitmq_consumer_timeout(1500):
        async with harness(tmp_path, mongo_uri, docker_client, PAIQ_AMQP_URL=amqp_url, PAIQ_QUEUE_PREFIX=prefix,
                           PAIQ_EXCHANGE=f"{prefix}.events") as h, open_bus(h.settings) as bus:
            seen: list[CloudEvent] = []

            async def record(event: CloudEvent) -> Sequence[CloudEvent]:
                seen.append(event)
                return []

            router = Router()
            for kind in (TaskStarted, TaskExited):
                router.on(kind, record)
            await bus.subscribe(f"{prefix}.observer", ["task.*"], router, durable=False)
            driver = SlowPullDriver.from_url(None)
            assert isinstance(driver, SlowPullDriver)
            driver.release = asyncio.Event()

            async def exited(job_id: str) -> None:
                for _ in range(300):
                    if any(isinstance(e, TaskExited) and e.subject == job_id for e in seen):
                        return
                    await asyncio.sleep(0.1)
                raise AssertionError(f"{job_id} never exited: {seen}")

            async with running_launcher(h.settings, h.store, bus, driver=driver):  # type: ignore[arg-type]
                broken: list[str] = []  # channels the broker closed (its consumer timeout, say)
                for channel in bus._consume_channels:  # type: ignore[attr-defined]  # the launcher's, for this test
                    channel.close_callbacks.add(lambda _, exc=None: broken.append(repr(exc)))
                job, specs = await h.job("long-pull", command="true")
                await bus.publish([LaunchTasks(subject=job.id, data=LaunchTasksData(
                    job_id=job.id, attempt=job.attempt, node_id=h.node_id, tasks=tuple(specs)))])
                await until(lambda: driver.pulls == 1, "the pull started")
                await asyncio.sleep(3)  # the pull outlives the broker's 1.5 s timeout, checked every 0.5 s
                driver.release.set()
                await exited(job.id)
                after, after_specs = await h.job("after-long-pull", command="true")  # the channel still consumes
                await bus.publish([LaunchTasks(subject=after.id, data=LaunchTasksData(
                    job_id=after.id, attempt=after.attempt, node_id=h.node_id, tasks=tuple(after_specs)))])
                await exited(after.id)
                assert broken == [], f"the broker closed a channel: {broken}"
            started = [e for e in seen if isinstance(e, TaskStarted) and e.subject == job.id]
            assert len({e.data.container_id for e in started}) == 1, started
            assert driver.pulls == 2, "one pull per job"
            handled = {s.labels["outcome"]: s.value for m in EVENTS_HANDLED.collect() for s in m.samples
                       if s.name.endswith("_total") and s.labels.get("queue") == f"{prefix}.launcher.{h.node_id}"}
            assert handled == {"ok": 2.0}, f"each launch delivered and acked once, the channel never broken: {handled}"
            connection = await aio_pika.connect(amqp_url)
            async with connection:
                channel = await connection.channel()
                for queue in (f"{prefix}.launcher.{h.node_id}", f"{prefix}.dead"):
                    await channel.queue_delete(queue)
                await channel.exchange_delete(f"{prefix}.events")

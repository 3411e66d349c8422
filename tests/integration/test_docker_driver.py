"""The Docker driver against the real engine: limits, mounts, exits, OOM, find, device requests."""

from __future__ import annotations

import asyncio
from pathlib import Path

import docker
import pytest
from pydantic import SecretStr

from services.launcher.container.sshsetup import COMMAND_PREFIX, SSHD_PATHS, ssh_files
from services.launcher.engine.docker_driver import DockerDriver, create_args
from services.launcher.engine.driver import ContainerExit, ContainerSpec
from shared.errors import DriverError
from shared.tasks.jobkeys import JobKey
from tests.infra import unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]



def spec(node_id: str, command: str, **kw: object) -> ContainerSpec:
    values: dict[str, object] = {
        "name": unique("paiq-drv-"), "image": "local/busybox:latest", "command": command,
        "env": {"A": "1"}, "labels": {"paiq.job": "u~j", "paiq.node": node_id, "paiq.role": "r", "paiq.index": "0"},
        "cpus": 1, "memory_mb": 100, "shm_mb": 32}
    values.update(kw)
    return ContainerSpec.model_validate(values)


async def next_exit(driver: DockerDriver, container_id: str) -> ContainerExit:
    async def find() -> ContainerExit:
        async for ex in driver.exits():
            if ex.id == container_id:
                return ex
        raise AssertionError("event stream ended")

    return await asyncio.wait_for(find(), 30)


async def test_limits_env_and_read_only_code_dir(driver: DockerDriver, node_id: str, tmp_path: Path,
                                                 docker_client: docker.DockerClient) -> None:
    (tmp_path / "main.sh").write_text("echo code-ok")
    s = spec(node_id, "sh /pai/code/main.sh; echo $A; df -m /dev/shm | tail -1; "
             "touch /pai/code/x 2>/dev/null || echo ro-ok; "
             "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max",
             code_dir=str(tmp_path))
    cid = await driver.run(s)
    result = await asyncio.to_thread(docker_client.api.wait, cid)
    assert result["StatusCode"] == 0
    lines = (await driver.logs_tail(cid, 20)).splitlines()
    assert lines[0] == "code-ok" and lines[1] == "1"
    [shm] = [line.split() for line in lines if line.endswith("/dev/shm")]
    assert shm[1] == "32", f"/dev/shm must be shmMB: {shm}"
    assert "ro-ok" in lines, "codeDir must be read-only"
    assert lines[-1] == str(100 * 1024 * 1024)
    attrs = docker_client.api.inspect_container(cid)
    assert attrs["HostConfig"]["NetworkMode"] == "host"
    assert attrs["HostConfig"]["Privileged"] is False
    assert attrs["HostConfig"]["Init"] is True
    assert attrs["HostConfig"]["NanoCpus"] == 1_000_000_000


async def test_exit_code_comes_from_the_event_stream(driver: DockerDriver, node_id: str) -> None:
    s = spec(node_id, "sleep 0.5; exit 7")
    watcher = await watching(driver, s.name)
    cid = await driver.run(s)
    ex = await asyncio.wait_for(watcher, 30)
    assert ex.id == cid and ex.exit_code == 7 and not ex.oom_killed
    assert ex.labels["paiq.job"] == "u~j"


async def watching(driver: DockerDriver, name: str) -> asyncio.Future[ContainerExit]:
    """The first exit of the container ``name``, followed from the engine's event stream, returned once the
    engine has that stream open (its request answered): every exit from then on reaches it."""
    opened = len(driver._streams)
    watcher = asyncio.ensure_future(_first_exit_for(driver, name))
    deadline = asyncio.get_running_loop().time() + 30
    while len(driver._streams) == opened:
        assert not watcher.done() and asyncio.get_running_loop().time() < deadline, "the event stream did not open"
        await asyncio.sleep(0.02)
    return watcher


async def _first_exit_for(driver: DockerDriver, name: str) -> ContainerExit:
    async for ex in driver.exits():
        info = await driver.find(name)
        if info is not None and info.id == ex.id:
            return ex
    raise AssertionError("stream ended")


async def test_a_task_past_its_memory_limit_is_oom_killed(driver: DockerDriver, node_id: str) -> None:
    s = spec(node_id, "head -c 300m /dev/zero | tail > /dev/null", memory_mb=100)
    watcher = await watching(driver, s.name)
    await driver.run(s)
    ex = await asyncio.wait_for(watcher, 30)
    assert ex.oom_killed


async def test_find_and_list_by_node(driver: DockerDriver, node_id: str) -> None:
    s = spec(node_id, "sleep 30")
    cid = await driver.run(s)
    found = await driver.find(s.name)
    assert found is not None and found.id == cid and found.running
    assert [c.id for c in await driver.list_managed(node_id)] == [cid]
    await driver.stop(cid, 1)
    stopped = await driver.find(s.name)
    assert stopped is not None and not stopped.running and stopped.exit_code in (137, 143)
    assert await driver.find(unique("nope-")) is None


async def test_gpu_tasks_request_exactly_their_devices(driver: DockerDriver, node_id: str) -> None:
    s = spec(node_id, "true", gpus=(1, 3))
    [request] = create_args(s)["device_requests"]
    assert (request.driver, request.device_ids, request.capabilities) == ("nvidia", ["1", "3"], [["gpu"]])
    assert "device_requests" not in create_args(spec(node_id, "true"))
    # No NVIDIA runtime here: the engine must refuse the request (proof it was sent), never ignore it.
    with pytest.raises(DriverError) as refused:
        await driver.run(s)
    assert refused.value.exit_code == 125
    assert await driver.find(s.name) is None, "a container that could not start is removed"


async def test_pulling_a_missing_image_is_a_254(driver: DockerDriver) -> None:
    with pytest.raises(DriverError) as refused:
        await driver.pull("127.0.0.1:1/nothing/here:1", None)
    assert refused.value.exit_code == 254
    assert "could not be pulled" in refused.value.reason


async def test_a_job_key_and_ssh_config_are_in_the_container_before_its_command(
        driver: DockerDriver, node_id: str, docker_client: docker.DockerClient) -> None:
    key = JobKey(job_id="alice~job~0a1b2c3d", user="alice", job_name="job", private_key=SecretStr("PRIVATE\n"),
                 public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJob paiq:alice~job",
                 user_keys=("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMine me@laptop",))
    # Role names with '.' and '~' (sanitised in variable names, kept in host names); a task of the
    # second role without an ssh port is left out.
    env = {"PAI_TASK_ROLE_LIST": "ps.server,w~1", "PAI_TASK_ROLE_TASK_COUNT_ps_server": "2",
           "PAI_TASK_ROLE_TASK_COUNT_w_1": "2", "PAI_HOST_IP_ps_server_0": "10.0.0.1",
           "PAI_PORT_LIST_ps_server_0_ssh": "30001", "PAI_HOST_IP_ps_server_1": "10.0.0.2",
           "PAI_PORT_LIST_ps_server_1_ssh": "30011,30012", "PAI_HOST_IP_w_1_0": "10.0.0.3",
           "PAI_PORT_LIST_w_1_0_ssh": "30021", "PAI_HOST_IP_w_1_1": "10.0.0.4", "PAI_CONTAINER_SSH_PORT": "30001"}
    command = COMMAND_PREFIX + ("cat /root/.ssh/config; stat -c '%a %n' /root/.ssh /root/.ssh/* /pai/bootstrap/*; "
                                "cat /root/.ssh/authorized_keys /root/.ssh/alice~job")
    cid = await driver.run(spec(node_id, command, env=env, files=ssh_files(key)))
    result = await asyncio.to_thread(docker_client.api.wait, cid)
    assert result["StatusCode"] == 0
    out = await driver.logs_tail(cid, 100)
    hosts = [(line.split()[1]) for line in out.splitlines() if line.startswith("Host ")]
    assert hosts == ["ps.server-0", "ps.server-1", "w~1-0"]
    assert "Host ps.server-1\n  HostName 10.0.0.2\n  Port 30011\n  User root\n" in out
    assert "  IdentityFile /root/.ssh/alice~job\n" in out
    assert "700 /root/.ssh" in out and "600 /root/.ssh/alice~job" in out and "600 /root/.ssh/authorized_keys" in out
    assert "644 /root/.ssh/alice~job.pub" in out and "755 /pai/bootstrap/paiq-ssh.sh" in out
    assert "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJob paiq:alice~job\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMine" in out
    assert "PRIVATE" in out
    # busybox has no sshd: the task ran all the same, its log untouched by the setup
    assert await driver.logs_tail(cid, 100, stderr_only=True) == ""
    assert await driver.first_file(cid, SSHD_PATHS) is None
    assert await driver.first_file(cid, ("/usr/sbin/sshd", "/bin/busybox", "/bin/sh")) == "/bin/busybox"

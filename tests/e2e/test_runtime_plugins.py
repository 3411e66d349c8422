"""OpenPAI's runtime plugins (``extras.com.microsoft.pai.runtimeplugin``) in running v2 jobs, in both platform
shapes: ``cmd`` (pre/post commands in order; a failing pre command fails the task with its code), ``ssh``
(jobssh between tasks behind sshbarrier, userssh with the user's own key), ``git`` (a clone of a local
bare repository before the commands), ``tensorboard`` (a server at the address the job shows: busybox's
httpd where the image has no tensorboard), ``teamwise_storage`` (the operator's directory mounted where the
config says; refused for a user it does not allow), and an unknown plugin named in the warnings."""

from __future__ import annotations

import asyncio
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from services.cli.client import ApiCallError, PaiqClient
from tests.e2e.conftest import logged_in
from tests.e2e.test_ssh import SSHD_IMAGE, log_line, running_ssh_info, sshd_image  # noqa: F401 (a fixture)
from tests.infra import EnvSink, Platform, start_platform, stop_platform, unique, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

PLUGINS = "com.microsoft.pai.runtimeplugin"
OWNER = "storage-owner"


@dataclass(frozen=True)
class Storage:
    config: Path
    host_dir: Path


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory) -> Storage:
    root = tmp_path_factory.mktemp("storages")
    host_dir = root / "team"
    host_dir.mkdir()
    (host_dir / "marker.txt").write_text("team-storage\n")
    config = root / "storages.yaml"
    config.write_text(yaml.safe_dump({"storages": [
        {"name": "team", "hostPath": str(host_dir), "mountPath": "/mnt/team", "users": [OWNER]}]}))
    return Storage(config=config, host_dir=host_dir)


@pytest.fixture(scope="module", params=["all-in-one", "separate"])
def platform(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, mongo_uri: str,
             amqp_url: str, docker_client: docker.DockerClient, storage: Storage) -> Iterator[Platform]:
    """The conftest's platform with an operator's storage config."""
    shape = str(request.param)
    p = start_platform(shape, tmp_path_factory.mktemp(shape), mongo_uri=mongo_uri, amqp_url=amqp_url,
                       PAIQ_STORAGE_CONFIG=str(storage.config))
    try:
        yield p
    finally:
        stop_platform(p, docker_client)


def v2_job(name: str, roles: dict[str, list[str]], plugins: list[dict[str, Any]], *,
           image: str = "local/busybox:latest", instances: int = 1) -> bytes:
    document = {
        "protocolVersion": 2, "name": name, "type": "job",
        "prerequisites": [{"name": "image", "type": "dockerimage", "uri": image}],
        "taskRoles": {role: {"instances": instances, "dockerImage": "image", "commands": commands,
                             "resourcePerInstance": {"cpu": 1, "memoryMB": 256, "gpu": 0}}
                      for role, commands in roles.items()},
        "extras": {PLUGINS: plugins},
    }
    return yaml.safe_dump(document, sort_keys=False).encode()


def sent(sink: EnvSink, *pairs: str) -> str:
    return "(" + "; ".join(f'echo "{p}"' for p in pairs) + f") | nc $PAI_CONTAINER_HOST_IP {sink.port}"


def only_task(detail: dict[str, Any], role: str = "main") -> dict[str, Any]:
    [task] = detail["taskRoles"][role]["taskStatuses"]
    return dict(task)


async def test_cmd_runs_pre_and_post_commands_in_order(api: PaiqClient, user: str) -> None:
    name = unique("cmd-")
    async with EnvSink() as sink:
        answer, _ = await api.submit_v2(v2_job(name, {"main": ["echo user >> /tmp/order"]}, [
            {"plugin": "cmd", "parameters": {"preCommands": ["echo pre1 > /tmp/order", "echo pre2 >> /tmp/order"],
                                             "postCommands": ["echo post >> /tmp/order",
                                                              sent(sink, "ORDER=$(tr '\\n' , < /tmp/order)")]}},
            {"plugin": "nni-something"}]))
        detail, seen = await wait_final(api, user, name)
        [report] = await sink.wait_for(1)
    assert detail["jobStatus"]["state"] == "SUCCEEDED", (seen, detail["jobStatus"])
    assert report["ORDER"] == "pre1,pre2,user,post,"
    assert "runtime plugin 'nni-something' is not supported by paiq" in str(answer)


async def test_a_failing_pre_command_fails_the_task_with_its_exit_code(api: PaiqClient, user: str) -> None:
    name = unique("cmdfail-")
    await api.submit_v2(v2_job(name, {"main": ["echo the user command ran"]}, [
        {"plugin": "cmd", "parameters": {"preCommands": ["echo pre", "sh -c 'exit 7'", "echo never"]}}]))
    detail, _ = await wait_final(api, user, name)
    assert detail["jobStatus"]["state"] == "FAILED"
    assert only_task(detail)["containerExitCode"] == 7


@pytest.fixture
def bare_repo(tmp_path: Path) -> Path:
    """A local bare repository holding one commit with a README."""
    work, bare = tmp_path / "work", tmp_path / "repo.git"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(work)], check=True)
    (work / "README").write_text("hello-from-git\n")
    subprocess.run([*git, "-C", str(work), "add", "README"], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-qm", "first"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    return bare


@pytest.fixture
def user_key(tmp_path: Path) -> Path:
    """A key pair of the user's own (``.pub`` beside it)."""
    key = tmp_path / "mine"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key


def fetch(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return str(resp.read().decode())
    except OSError:
        return ""


async def test_git_clones_a_local_bare_repository_before_the_commands(platform: Platform, api: PaiqClient,
                                                                      user: str, bare_repo: Path) -> None:
    bare = bare_repo
    name = unique("git-")
    async with EnvSink() as sink:
        await api.submit_v2(v2_job(name, {"main": [sent(sink, "CONTENT=$(cat /code/README)")]}, [
            {"plugin": "git", "parameters": {"repo_uri": f"file://{bare}", "clone_dir": "/code"}}]))
        detail, seen = await wait_final(api, user, name)
        [report] = await sink.wait_for(1)
    assert detail["jobStatus"]["state"] == "SUCCEEDED", (seen, detail["jobStatus"])
    assert report["CONTENT"] == "hello-from-git"
    clones = Path(platform.env["PAIQ_DATA_DIR"]) / "fs" / ".paiq" / "git"  # the default file system's
    for _ in range(100):  # removed with the container, just after the exit is reported
        if not any(clones.glob("*")):
            break
        await asyncio.sleep(0.1)
    assert not any(clones.glob("*"))


async def test_tensorboard_answers_at_the_address_the_job_shows(api: PaiqClient, user: str) -> None:
    name = unique("tb-")
    await api.submit_v2(v2_job(name, {"main": ["echo tensorboard-here > /tmp/tb/index.html", "sleep 120"]}, [
        {"plugin": "tensorboard", "parameters": {"logdir": {"run": "/tmp/tb"}}}]))
    body, address = "", None
    for _ in range(240):
        address = (await api.v2_job(user, name))["tensorboardAddress"]
        if address:
            body = await asyncio.to_thread(fetch, f"{address}/index.html")
        if body:
            break
        await asyncio.sleep(0.25)
    task = only_task(await api.job(user, name))
    await api.stop(user, name)
    assert body.strip() == "tensorboard-here"
    assert address == f"http://{task['containerIp']}:{task['containerPorts']['tensorboard']}", "the first task's port"


async def test_teamwise_storage_mounts_the_configured_directory_for_its_users(
        admin: PaiqClient, storage: Storage, user: str) -> None:
    owner = await logged_in(admin, OWNER)
    name = unique("storage-")
    plugin = [{"plugin": "teamwise_storage", "parameters": {"storageConfigNames": ["team"]}}]
    async with EnvSink() as sink:
        await owner.submit_v2(v2_job(name, {"main": [sent(sink, "MARKER=$(cat /mnt/team/marker.txt)"),
                                                     "echo from-task > /mnt/team/written.txt"]}, plugin))
        detail, seen = await wait_final(owner, OWNER, name)
        [report] = await sink.wait_for(1)
    assert detail["jobStatus"]["state"] == "SUCCEEDED", (seen, detail["jobStatus"])
    assert report["MARKER"] == "team-storage"
    assert (storage.host_dir / "written.txt").read_text() == "from-task\n"

    other = await logged_in(admin, user)
    with pytest.raises(ApiCallError) as refused:
        await other.submit_v2(v2_job(unique("storage-"), {"main": ["true"]}, plugin))
    assert refused.value.status == 403 and "storage team" in str(refused.value)
    with pytest.raises(ApiCallError) as unknown:
        await other.submit_v2(v2_job(unique("storage-"), {"main": ["true"]}, [
            {"plugin": "teamwise_storage", "parameters": {"storageConfigNames": ["nope"]}}]))
    assert unknown.value.status == 400 and "storage nope" in str(unknown.value)


async def test_ssh_jobssh_behind_the_barrier_and_userssh_with_the_users_key(
        api: PaiqClient, user: str, sshd_image: str, user_key: Path) -> None:  # noqa: F811
    key = user_key
    name = unique("ssh-")
    worker = 'echo "I am $PAI_CURRENT_TASK_ROLE_NAME-$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX" > /tmp/whoami'
    # past the barrier every peer's sshd answers; the worker's file may still be on its way
    ps = ('for i in $(seq 120); do out=$(ssh worker-0 cat /tmp/whoami 2>/dev/null) && [ -n "$out" ] && break; '
          'sleep 0.5; done; echo "ssh said: $out"')
    await api.submit_v2(v2_job(name, {"ps": [ps, "sleep 300"], "worker": [worker, "sleep 300"]}, [
        {"plugin": "ssh", "parameters": {"jobssh": True, "sshbarrier": True,
                                         "userssh": {"type": "custom", "value": key.with_suffix(".pub").read_text()}}}],
        image=sshd_image))
    try:
        info = await running_ssh_info(api, user, name, 2)
        assert await log_line(api, user, name, "ps", "ssh said: ") == "ssh said: I am worker-0"
        [w] = [c for c in info["containers"] if c["taskRoleName"] == "worker"]
        done = await asyncio.to_thread(subprocess.run, [
            "ssh", "-i", str(key), "-p", str(w["sshPort"]), "-o", "StrictHostKeyChecking=no", "-o",
            "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", f"root@{w['sshIp']}", "cat /tmp/whoami"],
            capture_output=True, text=True, timeout=30, check=False)
        assert done.stdout.strip() == "I am worker-0", done.stderr
    finally:
        await api.stop(user, name)

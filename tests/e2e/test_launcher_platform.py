"""The launcher in the whole platform (four processes over RabbitMQ and the MongoDB-wire server).

A registry that demands a login, logs served while a task runs and after its container is gone, codeDir
through the API, ``kill -9`` of the launcher while tasks run, and a launch command delivered twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from pymongo import AsyncMongoClient

from services.cli.client import ApiCallError, PaiqClient
from services.launcher.reconcile import plan_of
from shared.bus.amqp import open_amqp_bus
from shared.events import LaunchTasks, LaunchTasksData
from shared.records import JobRecord
from shared.tasks.launchspec import task_specs
from tests.e2e.conftest import job_config, logged_in
from tests.infra import (
    PYTHON,
    REPO,
    Platform,
    Registry,
    free_port,
    push_image,
    run_registry,
    start_platform,
    stop_platform,
    unique,
    wait_final,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

PASSWORD = f"pw-{unique('')}-never-shown"
REGISTRY_USER = "paiq-puller"


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory, mongo_uri: str, amqp_url: str,
             docker_client: docker.DockerClient) -> Iterator[Platform]:
    """The separate shape only: its launcher is a process of its own, to be killed."""
    p = start_platform("separate", tmp_path_factory.mktemp("launcher-e2e"), mongo_uri=mongo_uri,
                       amqp_url=amqp_url)
    try:
        yield p
    finally:
        stop_platform(p, docker_client)


@pytest.fixture(scope="module")
def auth_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with run_registry(tmp_path_factory.mktemp("auth-registry"), login=(REGISTRY_USER, PASSWORD)) as registry:
        yield registry


async def paiq_cli(platform: Platform, home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAIQ_")}
    env.update({"PAIQ_DATA_DIR": str(home), "PAIQ_API": platform.api})
    return await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "services.cli.main", *args], input=stdin,
                                   env=env, cwd=REPO, capture_output=True, text=True, timeout=60)


def fs_root(platform: Platform) -> Path:
    return platform.workdir / "data" / "fs"


def container_ids(docker_client: docker.DockerClient, label: str) -> list[str]:
    return [c["Id"] for c in docker_client.api.containers(all=True, filters={"label": label})]


async def stored_documents(platform: Platform) -> list[dict[str, Any]]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(platform.env["PAIQ_MONGODB_URI"])
    try:
        db = client[platform.env["PAIQ_MONGODB_DATABASE"]]
        return [doc for name in await db.list_collection_names() async for doc in db[name].find({})]
    finally:
        await client.close()


async def log_text(api: PaiqClient, user: str, name: str, role: str = "main", index: int = 0,
                   **options: Any) -> str:
    return "".join([line async for line in api.task_log(user, name, role, index, **options)])


async def test_a_private_registry_image_runs_with_its_authfile_and_the_password_goes_nowhere(
        platform: Platform, api: PaiqClient, user: str, auth_registry: Registry,
        docker_client: docker.DockerClient) -> None:
    # One image per job: an image already on the node is not pulled again (nor its login checked).
    image, other = (auth_registry.image(f"private/{unique('img')}:1") for _ in range(2))
    for name in (image, other):
        push_image(docker_client, "local/busybox:latest", name,
                   auth={"username": REGISTRY_USER, "password": PASSWORD})
    auth_dir = fs_root(platform) / "auth" / user
    auth_dir.mkdir(parents=True)
    (auth_dir / "good").write_text(f"{auth_registry.host}\n{REGISTRY_USER}\n{PASSWORD}\n")
    (auth_dir / "bad").write_text(f"{auth_registry.host}\n{REGISTRY_USER}\nnot-the-password\n")

    runs = {
        "right": job_config("right", image=image, command="env; echo pulled-and-ran",
                            authFile="$PAI_DEFAULT_FS_URI/auth/$PAI_USER_NAME/good"),
        "wrong": job_config("wrong", image=other, command="true",
                            authFile=f"file://{auth_dir}/bad"),
        "missing": job_config("missing", image=image.rsplit(":", 1)[0] + ":no-such-tag", command="true",
                              authFile=f"{auth_dir}/good"),
    }
    for config in runs.values():
        await api.submit(user, json.dumps(config).encode())
    # An authFile outside the default file system is refused at submit, before anything is stored.
    with pytest.raises(ApiCallError) as escape:
        await api.submit(user, json.dumps(job_config("escape", image=other, command="true",
                                                     authFile="/etc/passwd")).encode())
    assert escape.value.status == 400
    assert escape.value.message.startswith("authFile: authFile /etc/passwd is outside the default file system")
    right, _ = await wait_final(api, user, "right")
    wrong, _ = await wait_final(api, user, "wrong")
    missing, _ = await wait_final(api, user, "missing")

    assert right["jobStatus"]["state"] == "SUCCEEDED", right
    for detail, says in ((wrong, "the registry refused the credentials in authFile"),
                         (missing, "does not exist in its registry")):
        assert detail["jobStatus"]["state"] == "FAILED"
        assert detail["jobStatus"]["appExitCode"] == 254
        assert says in detail["jobStatus"]["appExitTriggerMessage"], detail["jobStatus"]

    right_log = await log_text(api, user, "right")
    assert "PAI_JOB_NAME=right" in right_log, "the task printed its environment"
    registry_log = Path(str(auth_registry.proc.args[-1])).parent / "registry.log"
    seen = [platform.logs(), registry_log.read_text(errors="replace"), right_log,
            repr(await stored_documents(platform))]
    for name in runs:
        seen += [json.dumps(await api.job(user, name)), json.dumps(await api.config(user, name))]
    assert REGISTRY_USER in seen[1], "the registry saw the login"
    assert all(PASSWORD not in text for text in seen), "the registry password leaked"


async def test_logs_stream_while_a_task_runs_and_outlive_its_container(
        platform: Platform, admin: PaiqClient, user: str, tmp_path: Path,
        docker_client: docker.DockerClient) -> None:
    api = await logged_in(admin, user, "logs-secret")
    command = "for i in 1 2 3 4 5 6; do echo tick-$i; sleep 0.5; done; echo last-words >&2"
    await api.submit(user, json.dumps(job_config("ticker", command=command)).encode())
    job_id = await _job_id(platform, user, "ticker")

    received: list[tuple[str, str]] = []  # (line, the job's state when it arrived)
    async for line in api.task_log(user, "ticker", "main", 0, follow=True):
        received.append((line, (await api.job(user, "ticker"))["jobStatus"]["state"]))
    detail, _ = await wait_final(api, user, "ticker")

    assert [line for line, _ in received] == [f"tick-{i}\n" for i in range(1, 7)] + ["last-words\n"]
    assert received[0][1] == "RUNNING", "the first line came while the task was still running"
    assert detail["jobStatus"]["state"] == "SUCCEEDED"
    for _ in range(50):
        if not container_ids(docker_client, f"paiq.job={job_id}"):
            break
        await asyncio.sleep(0.1)
    assert container_ids(docker_client, f"paiq.job={job_id}") == [], "the container is gone"
    assert await log_text(api, user, "ticker") == "".join(line for line, _ in received)
    assert await log_text(api, user, "ticker", tail=2) == "tick-6\nlast-words\n"
    assert await log_text(api, user, "ticker", stream="stderr") == "last-words\n"

    login = await paiq_cli(platform, tmp_path, "--user", user, "login", "--password-stdin", stdin="logs-secret\n")
    assert login.returncode == 0, login.stderr
    cli = await paiq_cli(platform, tmp_path, "logs", "ticker", "main", "0", "--tail", "3")
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout == "tick-5\ntick-6\nlast-words\n"
    everything = await paiq_cli(platform, tmp_path, "logs", "ticker")
    assert everything.stdout == "".join(line for line, _ in received)


async def test_a_log_route_needs_the_owner(platform: Platform, admin: PaiqClient, api: PaiqClient,
                                          user: str) -> None:
    await api.submit(user, json.dumps(job_config("private-log", command="echo mine")).encode())
    await wait_final(api, user, "private-log")
    other = await logged_in(admin, unique("other"))
    with pytest.raises(ApiCallError) as refused:
        await log_text(other, user, "private-log")
    assert refused.value.code == "ForbiddenUserError"
    assert await log_text(admin, user, "private-log") == "mine\n", "an administrator may read it"
    with pytest.raises(ApiCallError) as unknown:
        await log_text(api, user, "private-log", role="nope")
    assert unknown.value.code == "NoJobError"


async def test_code_dir_through_the_api_is_read_only_and_an_escape_fails_the_task(
        platform: Platform, api: PaiqClient, user: str) -> None:
    code = fs_root(platform) / "code" / user
    code.mkdir(parents=True)
    (code / "train.sh").write_text("echo training from /pai/code\n")
    await api.submit(user, json.dumps(job_config(
        "with-code", codeDir="$PAI_DEFAULT_FS_URI/code/$PAI_USER_NAME",
        command="sh /pai/code/train.sh && ! touch /pai/code/x 2>/dev/null")).encode())
    with pytest.raises(ApiCallError) as escaping:
        await api.submit(user, json.dumps(job_config(
            "escaping", codeDir="$PAI_DEFAULT_FS_URI/../../..", command="ls /pai/code")).encode())
    assert escaping.value.status == 400 and escaping.value.message.startswith("codeDir: ")
    assert "'..' is not allowed" in escaping.value.message
    ok, _ = await wait_final(api, user, "with-code")
    assert ok["jobStatus"]["state"] == "SUCCEEDED", ok
    assert await log_text(api, user, "with-code") == "training from /pai/code\n"


async def _job_id(platform: Platform, user: str, name: str) -> str:
    for _ in range(50):
        for doc in await stored_documents(platform):
            if doc.get("user") == user and doc.get("name") == name and "config" in doc:
                return str(doc["_id"])
        await asyncio.sleep(0.1)
    raise AssertionError(f"job {name} not stored")


async def _job_record(platform: Platform, job_id: str) -> JobRecord:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(platform.env["PAIQ_MONGODB_URI"])
    try:
        doc = await client[platform.env["PAIQ_MONGODB_DATABASE"]]["jobs"].find_one({"_id": job_id})
    finally:
        await client.close()
    assert doc is not None
    return JobRecord.from_document(doc)


async def _wait_tasks_running(api: PaiqClient, user: str, name: str, count: int) -> list[str]:
    for _ in range(300):
        tasks = (await api.job(user, name))["taskRoles"]["main"]["taskStatuses"]
        if sum(t["taskState"] == "RUNNING" for t in tasks) == count:
            return [t["containerId"] for t in tasks]
        await asyncio.sleep(0.1)
    raise AssertionError(f"{name}: {count} tasks never ran together")


def _restart_launcher(platform: Platform) -> subprocess.Popen[bytes]:
    port = free_port()
    env = {**platform.env, "PAIQ_LAUNCHER_OPS_PORT": str(port)}
    platform.ops["launcher"] = f"http://127.0.0.1:{port}"
    with (platform.workdir / "launcher-restarted.log").open("ab") as out:
        proc = subprocess.Popen([PYTHON, "-m", "services.launcher"], env=env, cwd=REPO, stdout=out, stderr=out)
    platform.procs.append(proc)
    return proc


async def test_kill_9_of_the_launcher_while_three_tasks_run_loses_nothing(
        platform: Platform, api: PaiqClient, user: str, docker_client: docker.DockerClient) -> None:
    command = "echo begin-$PAI_TASK_INDEX; if [ $PAI_TASK_INDEX = 0 ]; then sleep 2; else sleep 7; fi; echo end"
    await api.submit(user, json.dumps(job_config("survivor", command=command, roles=[
        {"name": "main", "taskNumber": 3, "memoryMB": 128, "command": command}])).encode())
    before = await _wait_tasks_running(api, user, "survivor", 3)
    launcher = platform.procs[2]
    assert launcher.args[-1] == "services.launcher"
    launcher.send_signal(signal.SIGKILL)
    launcher.wait(10)
    for _ in range(100):  # task 0 ends (after its 2 s) while no launcher watches
        if docker_client.containers.get(before[0]).status == "exited":
            break
        await asyncio.sleep(0.1)
    assert docker_client.containers.get(before[0]).status == "exited"
    running = {c.id for c in docker_client.containers.list(filters={"label": f"paiq.node={platform.node_id}"})}
    assert set(before[1:]) <= running, "killing the launcher killed no task"
    restarted = _restart_launcher(platform)
    try:
        detail, _ = await wait_final(api, user, "survivor", limit_s=60)
    finally:
        platform.procs[2] = restarted
    tasks = detail["taskRoles"]["main"]["taskStatuses"]
    assert detail["jobStatus"]["state"] == "SUCCEEDED", detail
    assert [t["containerId"] for t in tasks] == before, "the same containers ran to their end"
    assert [t["containerExitCode"] for t in tasks] == [0, 0, 0]
    for i in range(3):
        assert await log_text(api, user, "survivor", index=i) == f"begin-{i}\nend\n"


def launches_handled(platform: Platform) -> float:
    """How many launch commands the launcher has handled to the end (its paiq_events_handled_total)."""
    with urllib.request.urlopen(platform.ops["launcher"] + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    key = f'type="node.{platform.node_id}.launch"'
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("paiq_events_handled_total{") and key in line and 'outcome="ok"' in line)


async def _until_launches_handled(platform: Platform, count: float, limit_s: float = 30) -> None:
    for _ in range(int(limit_s / 0.1)):
        if await asyncio.to_thread(launches_handled, platform) >= count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the launcher handled {launches_handled(platform)} launches, not {count}")


async def test_a_launch_delivered_twice_starts_one_container(
        platform: Platform, api: PaiqClient, user: str, docker_client: docker.DockerClient) -> None:
    await api.submit(user, json.dumps(job_config("once", command="sleep 3; echo once")).encode())
    [container] = await _wait_tasks_running(api, user, "once", 1)
    job = await _job_record(platform, await _job_id(platform, user, "once"))
    plan = plan_of(job)
    assert plan is not None
    again = LaunchTasks(subject=job.id, data=LaunchTasksData(
        job_id=job.id, attempt=job.attempt, node_id=platform.node_id,
        tasks=tuple(task_specs(job, plan, f"file://{fs_root(platform)}"))))
    handled = launches_handled(platform)
    async with open_amqp_bus(platform.env["PAIQ_AMQP_URL"], platform.env["PAIQ_EXCHANGE"],
                             unique("dup-")) as bus:
        await bus.publish([again, again])
        await _until_launches_handled(platform, handled + 2)  # the launcher took both in
        assert container_ids(docker_client, f"paiq.job={job.id}") == [container]
        detail, _ = await wait_final(api, user, "once")
        await bus.publish([again])  # and once more after the task ended and its container went
        await _until_launches_handled(platform, handled + 3)
    assert detail["jobStatus"]["state"] == "SUCCEEDED"
    assert container_ids(docker_client, f"paiq.job={job.id}") == []
    assert await log_text(api, user, "once") == "once\n", "it ran once"
    assert (await api.job(user, "once"))["taskRoles"]["main"]["taskStatuses"][0]["containerId"] == container

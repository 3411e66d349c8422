"""SSH into a job's tasks, as seed 000 describes it: ``ssh worker-0`` between tasks, ``GET .../ssh`` and the
key pair from outside (``paiq ssh``), and the private key nowhere but where it belongs.

The tasks run ``paiq/sshd:test``, a Debian image with openssh-server built here
(tests/deploy/build-images.sh sshd), as OpenPAI's own images had one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from services.cli.client import ApiCallError, PaiqClient
from tests.e2e.conftest import job_config, logged_in
from tests.e2e.feedwatch import connected_feed
from tests.infra import REPO, Platform, unique, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

SSHD_IMAGE = "paiq/sshd:test"
WORKER = 'echo "I am $PAI_CURRENT_TASK_ROLE_NAME-$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX" > /tmp/whoami; sleep 300'
# ps[0] asks worker[0] who it is through ssh, as seed 000 shows, and says what it heard.
PS = ('for i in $(seq 120); do out=$(ssh worker-0 cat /tmp/whoami 2>/tmp/ssh.err) && [ -n "$out" ] && break; '
      'sleep 0.5; done; echo "ssh said: $out"; cat /tmp/ssh.err >&2; '
      'env_seen=$(ssh worker-0 \'bash -lc "echo \\$PAI_CURRENT_TASK_ROLE_NAME/\\$PAI_TASK_ROLE_INDEX"\'); '
      'echo "login env: $env_seen"; sleep 300')


@pytest.fixture(scope="session")
def sshd_image() -> str:
    done = subprocess.run(["bash", str(REPO / "tests" / "deploy" / "build-images.sh"), "sshd"],
                          capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return SSHD_IMAGE


def ssh_job(name: str, image: str) -> dict[str, object]:
    return job_config(name, command="", image=image, roles=[
        {"name": "ps", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 256, "command": PS},
        {"name": "worker", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 256, "command": WORKER},
    ])


@contextlib.asynccontextmanager
async def collected_events(platform: Platform, user: str, name: str) -> AsyncIterator[list[dict[str, Any]]]:
    """The job's events from the live feed, connected before the block starts."""
    seen: list[dict[str, Any]] = []
    task = await connected_feed(platform.api, seen, user=user, job=name)
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def until_seen(events: list[dict[str, Any]], done: Callable[[list[dict[str, Any]]], bool],
                     limit_s: float = 30) -> None:
    for _ in range(int(limit_s * 10)):
        if done(events):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the feed never said so: {[e['type'] for e in events]}")


async def log_line(api: PaiqClient, user: str, name: str, role: str, starts: str, limit_s: float = 90) -> str:
    for _ in range(int(limit_s * 4)):
        text = "".join([line async for line in api.task_log(user, name, role, 0)])
        found = [line for line in text.splitlines() if line.startswith(starts)]
        if found:
            return found[0]
        await asyncio.sleep(0.25)
    raise AssertionError(f"{role}[0] never printed {starts!r}; its log:\n{text[-2000:]}")


async def running_ssh_info(api: PaiqClient, user: str, name: str, count: int) -> dict[str, Any]:
    for _ in range(240):
        info = await api.ssh_info(user, name)
        if len(info["containers"]) == count:
            return info
        await asyncio.sleep(0.25)
    raise AssertionError(f"the job's tasks never all ran: {info}")


@pytest.fixture
def cli_home(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "cli"


def paiq_cli(platform: Platform, home: Path, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAIQ_")}
    env.update({"PAIQ_API": platform.api, "PAIQ_TOKEN": token, "PAIQ_DATA_DIR": str(home)})
    return subprocess.run([sys.executable, "-m", "services.cli.main", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False)


async def test_a_task_sshes_into_its_peer_and_paiq_ssh_runs_a_command_in_a_task(
        api: PaiqClient, admin: PaiqClient, user: str, platform: Platform, sshd_image: str, cli_home: Path) -> None:
    name = unique("ssh")
    async with collected_events(platform, user, name) as events:
        await api.submit(user, json.dumps(ssh_job(name, sshd_image)).encode())
        info = await running_ssh_info(api, user, name, 2)

        # ssh worker-0 from ps[0], with the job's key and the ssh config paiq wrote
        assert await log_line(api, user, name, "ps", "ssh said: ") == "ssh said: I am worker-0"
        # a login shell over ssh has the task's environment
        assert await log_line(api, user, name, "ps", "login env: ") == "login env: worker/0"

        # OpenPAI's answer of GET .../ssh
        pair = info["keyPair"]
        key_name = f"{user}~{name}"
        assert (pair["privateKeyFileName"], pair["publicKeyFileName"]) == (key_name, f"{key_name}.pub")
        assert pair["privateKeyDirectDownloadLink"] == pair["folderPath"] + key_name
        detail = await api.job(user, name)
        for c in info["containers"]:
            task = detail["taskRoles"][c["taskRoleName"]]["taskStatuses"][c["taskIndex"]]
            assert (c["sshIp"], c["sshPort"]) == (task["containerIp"], task["containerPorts"]["ssh"])
            assert task["containerExitReason"] == "", "an image with sshd gets no message"

        # paiq ssh from the host runs a command in a task
        password_user_token = (await api.with_token(None).login(user, "secret-pass"))["token"]
        done = await asyncio.to_thread(paiq_cli, platform, cli_home, password_user_token,
                                       "ssh", f"{user}~{name}", "worker", "0", "--", "cat", "/tmp/whoami")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "I am worker-0"
        key_file = cli_home / "keys" / key_name
        assert key_file.stat().st_mode & 0o777 == 0o600
        missing = await asyncio.to_thread(paiq_cli, platform, cli_home, password_user_token,
                                          "ssh", f"{user}~{name}", "chief", "0", "--", "true")
        assert missing.returncode == 2 and "no running task chief 0; running: " in missing.stderr

        private = await api.key_file(user, name, key_name)
        public = await api.with_token(None).key_file(user, name, f"{key_name}.pub")
        assert private.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
        assert public.startswith("ssh-ed25519 ") and public.strip().endswith(f"paiq:{key_name}")

        await api.stop(user, name)
        final, _ = await wait_final(api, user, name)
        assert final["jobStatus"]["state"] == "STOPPED"
        # the last events reached the feed: the job's end, and the exit of every task that started (a task
        # ignoring SIGTERM exits PAIQ_STOP_GRACE_SECONDS later; under a loaded suite one took over 30 s). Tasks,
        # not events, are compared: events are delivered at least once (a full run saw one task.started twice).
        def tasks(seen: list[dict[str, Any]], kind: str) -> set[tuple[str, int]]:
            return {(e["data"]["role"], e["data"]["index"]) for e in seen if e["type"] == kind}

        await until_seen(events, lambda seen: any(e["type"] == "job.completed" for e in seen) and (
            tasks(seen, "task.exited") == tasks(seen, "task.started") == {("ps", 0), ("worker", 0)}), limit_s=90)

    # The private key is nowhere but in its own collection and the download: not in any log of any
    # service, any event, the job's answers, the lists, or any other document.
    secret = private.splitlines()[2]  # a line of the key's base64 body
    assert len(secret) > 40
    logs = platform.logs()
    assert user in logs and f"{user}~{name}~" in json.dumps(events), "the logs and the events are about this job"
    assert secret not in logs
    assert events and secret not in json.dumps(events)
    for answer in (await api.job(user, name), await api.config(user, name), await api.jobs(user),
                   await admin.jobs(), await api.ssh_info(user, name)):
        assert secret not in json.dumps(answer)
    if "PAIQ_MONGODB_DATABASE" in platform.env:  # the separate shape's database is reachable from here
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(platform.env["PAIQ_MONGODB_URI"])
        try:
            db = client[platform.env["PAIQ_MONGODB_DATABASE"]]
            names = await db.list_collection_names()  # job_keys too: the private key is sealed there
            assert "jobs" in names and "job_keys" in names
            for collection in names:
                async for doc in db[collection].find({}):
                    assert secret not in json.dumps(doc, default=str), collection
        finally:
            await client.close()


async def test_the_private_key_is_the_owners_and_the_admins_only(
        api: PaiqClient, admin: PaiqClient, user: str) -> None:
    name = unique("keys")
    await api.submit(user, json.dumps(job_config(name, command="true")).encode())
    key_name = f"{user}~{name}"
    other = await logged_in(admin, unique("other"))
    with pytest.raises(ApiCallError) as refused:
        await other.key_file(user, name, key_name)
    assert (refused.value.status, refused.value.code) == (403, "ForbiddenUserError")
    with pytest.raises(ApiCallError) as anonymous:
        await api.with_token(None).key_file(user, name, key_name)
    assert anonymous.value.status == 401
    with pytest.raises(ApiCallError) as unknown:
        await api.key_file(user, name, "id_rsa")
    assert (unknown.value.status, unknown.value.code) == (404, "NoJobSshInfoError")
    assert (await admin.key_file(user, name, key_name)) == (await api.key_file(user, name, key_name))
    # anyone may read the public key, as the job's hosts and ports
    assert (await other.key_file(user, name, f"{key_name}.pub")).startswith("ssh-ed25519 ")
    await wait_final(api, user, name)


async def test_an_image_without_sshd_runs_its_task_and_says_ssh_is_unavailable(
        api: PaiqClient, user: str) -> None:
    name = unique("nosshd")
    await api.submit(user, json.dumps(job_config(name, command="sleep 60")).encode())
    reason = ""
    for _ in range(240):
        task = (await api.job(user, name))["taskRoles"]["main"]["taskStatuses"][0]
        reason = task["containerExitReason"]
        if task["taskState"] == "RUNNING" and reason:
            break
        await asyncio.sleep(0.25)
    assert reason == ("ssh unavailable: the image has no sshd (install openssh-server in the image to ssh into "
                      "its tasks)")
    # the task's log is the user's: the setup wrote nothing there
    assert "".join([line async for line in api.task_log(user, name, "main", 0)]) == ""
    await api.stop(user, name)
    final, _ = await wait_final(api, user, name)
    assert final["jobStatus"]["state"] == "STOPPED"


async def test_a_malformed_user_key_is_refused_naming_the_field(api: PaiqClient, user: str) -> None:
    config = job_config(unique("badkey"), command="true", jobEnvs={"PAI_SSH_PUB_KEY": 'command="sh" ssh-rsa AAAA'})
    with pytest.raises(ApiCallError) as refused:
        await api.submit(user, json.dumps(config).encode())
    assert refused.value.status == 400
    assert refused.value.message.startswith("jobEnvs.PAI_SSH_PUB_KEY: line 1 is not an OpenSSH public key")


async def test_the_users_own_public_key_is_admitted_too(
        api: PaiqClient, user: str, sshd_image: str, tmp_path: Path) -> None:
    own = tmp_path / "mine"
    await asyncio.to_thread(subprocess.run, ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(own)],
                            check=True, timeout=30)
    name = unique("ownkey")
    config = job_config(name, command=WORKER, image=sshd_image,
                        jobEnvs={"PAI_SSH_PUB_KEY": (tmp_path / "mine.pub").read_text()})
    await api.submit(user, json.dumps(config).encode())
    [task] = (await running_ssh_info(api, user, name, 1))["containers"]
    line = ["ssh", "-i", str(own), "-p", task["sshPort"], "-o", "StrictHostKeyChecking=no", "-o",
            "UserKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
            f"root@{task['sshIp']}", "cat", "/tmp/whoami"]
    for _ in range(120):  # sshd starts with the task's command
        done = await asyncio.to_thread(subprocess.run, line, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode == 0:
            break
        await asyncio.sleep(0.25)
    assert (done.returncode, done.stdout.strip()) == (0, "I am main-0"), done.stderr
    await api.stop(user, name)
    await wait_final(api, user, name)

"""Kill -9 between a commit and its publish (issue 36): every event of every committed change reaches a
consumer that counts them by id, and every notification is sent, in both shapes.

Every process of the platform is armed (``PAIQ_FAULT_POINTS``, shared/faults.py) to kill itself with SIGKILL
at its N-th ``journal-committed`` (a writer's transaction with events has just committed, nothing of it
published) and at its M-th ``journal-published`` (the relay published a batch and did not record it). The
test acts as supervisor: a process that died is started again at once, unarmed (``paiq up`` on the same data
directory, its database left behind by the kill stopped first). Meanwhile 16 jobs are submitted (each POST
with an ``Idempotency-Key``, sent again when the answer was lost), a webhook subscription is told of each
end, and a stream client follows (``paiq events``' client: it takes the stream up again after the last
number it saw). Asserted: some process was killed at each point; every job ended SUCCEEDED; the stream
brought each job's whole lifecycle, each event once per id at most twice (at least once); the webhook got
every job's end, once per delivery id.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import aiohttp
import docker
import pytest

from services.cli.client import paiq_client
from shared.db.embedded import free_port
from tests.infra import (
    ADMIN_PASSWORD,
    ADMIN_USER,
    REPO,
    Platform,
    _wait_healthy,
    start_extra_process,
    start_platform,
    stop_orphaned_databases,
    stop_platform,
    unique,
    wait_answering,
    wait_final,
)
from tests.notifyharness import Hooks

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(420)]

JOBS = 16
LIFECYCLE = ["job.submitted", "job.scheduled", "task.started", "task.exited", "job.completed"]
FAULTS = "journal-committed:9,journal-published:5"


class Supervisor:
    """Starts again, unarmed, every process of the platform that died."""

    def __init__(self, platform: Platform) -> None:
        self.platform = platform
        self.restarts: list[str] = []
        self._task: asyncio.Task[None] | None = None

    async def watch(self) -> None:
        while True:
            for i, proc in enumerate(self.platform.procs):
                if proc.poll() is None:
                    continue
                name = " ".join(str(a) for a in proc.args[-2:])  # type: ignore[index]
                assert proc.returncode == -9, f"{name} ended by itself with {proc.returncode}:\n" \
                                              f"{self.platform.logs()[-3000:]}"
                self.restarts.append(name)
                if self.platform.shape == "all-in-one":
                    stop_orphaned_databases(self.platform.workdir)  # a paiq up killed -9 leaves its database
                env = {k: v for k, v in self.platform.env.items() if k != "PAIQ_FAULT_POINTS"}
                with (self.platform.workdir / f"restart-{len(self.restarts)}.log").open("wb") as log:
                    self.platform.procs[i] = subprocess.Popen(  # noqa: ASYNC220 - a child beside the test
                        proc.args, env=env, cwd=REPO, stdout=log, stderr=log)
                if self.platform.shape == "all-in-one":
                    await asyncio.to_thread(_wait_healthy, self.platform)
            await asyncio.sleep(0.2)

    def __enter__(self) -> Supervisor:
        self._task = asyncio.create_task(self.watch())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        if self._task.done() and self._task.exception() is not None:
            raise self._task.exception()  # type: ignore[misc]
        self._task.cancel()


async def _post_once(session: aiohttp.ClientSession, api: str, token: str, user: str, name: str) -> None:
    """Submit, sending the same request again (its Idempotency-Key) until an answer says it is stored."""
    key = uuid.uuid4().hex
    body = {"jobName": name, "image": "local/busybox:latest",
            "taskRoles": [{"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128, "command": "sleep 1"}]}
    for _ in range(120):
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with session.post(f"{api}/api/v1/user/{user}/jobs", json=body, timeout=aiohttp.ClientTimeout(10),
                                    headers={"Authorization": f"Bearer {token}", "Idempotency-Key": key}) as resp:
                if resp.status == 202:
                    return
                assert resp.status in (502, 503), await resp.text()
        await asyncio.sleep(0.5)
    raise AssertionError(f"job {name} was never accepted")


@pytest.mark.parametrize("shape", ["all-in-one", "separate"])
async def test_kill_9_between_commit_and_publish_loses_no_event_and_no_notification(
        shape: str, tmp_path: Path, mongo_uri: str, amqp_url: str, docker_client: docker.DockerClient) -> None:
    async with Hooks() as hooks:
        platform = start_platform(shape, tmp_path, mongo_uri=mongo_uri, amqp_url=amqp_url,
                                  PAIQ_FAULT_POINTS=FAULTS, PAIQ_NOTIFY_WEBHOOK_ALLOW="127.0.0.1",
                                  PAIQ_RECONCILE_SECONDS="2")
        try:
            if shape == "separate":  # the notifier too (paiq up runs it), answering before the first job: a
                port = free_port()  # notifier's first start tells the changes after it, not before
                notifier = start_extra_process(platform, "notify", "services.notify", PAIQ_NOTIFY_OPS_PORT=str(port))
                await asyncio.to_thread(wait_answering, f"http://127.0.0.1:{port}/healthz", notifier)
            with Supervisor(platform) as supervisor:
                user = unique("dur")
                async with paiq_client(platform.api) as anonymous:
                    admin = anonymous.with_token((await anonymous.login(ADMIN_USER, ADMIN_PASSWORD))["token"])
                    await admin.put_user(user, "secret-pass")
                    api = admin.with_token((await admin.with_token(None).login(user, "secret-pass"))["token"])
                    added, _ = await api._call("POST", "/api/v1/notifications/subscriptions", json={
                        "channel": "webhook", "url": hooks.url("ok/ends"), "kinds": ["succeeded", "failed"]})
                    hooks.secrets["ends"] = added["secret"]
                    seen: list[dict[str, Any]] = []
                    follower = asyncio.create_task(_follow(platform, seen, user))
                    await asyncio.sleep(1)
                    token = api._token or ""
                    async with aiohttp.ClientSession() as session:
                        for i in range(JOBS):
                            await _post_once(session, platform.api, token, user, f"d{i:02d}")
                            await asyncio.sleep(0.3)
                    for i in range(JOBS):
                        detail, _ = await wait_final(api, user, f"d{i:02d}", 180)
                        assert detail["jobStatus"]["state"] == "SUCCEEDED", json.dumps(detail)[:1500]
                    await _settled(seen, hooks)
                    follower.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await follower
            assert supervisor.restarts, "no process was killed: the fault points were never reached"
            by_job: dict[str, list[str]] = defaultdict(list)
            counts: dict[str, int] = defaultdict(int)
            for event in seen:
                counts[event["id"]] += 1
                if event["type"] in LIFECYCLE and counts[event["id"]] == 1:
                    by_job[event["subject"].split("~")[1]].append(event["type"])
            missing = {name: kinds for i in range(JOBS) if (kinds := sorted(
                set(LIFECYCLE) - set(by_job[name := f"d{i:02d}"])))}
            assert not missing, f"events missing from the stream (restarts: {supervisor.restarts}): {missing}"
            ends = hooks.received["ends"]
            told = {r.body["data"]["jobId"].split("~")[1] for r in ends}
            assert told == {f"d{i:02d}" for i in range(JOBS)}, f"notifications missing: {sorted(told)}"
            assert len({r.body["id"] for r in ends}) == len({r.body["data"]["jobId"] for r in ends}), \
                "one delivery per job's end (a repeat only with the same delivery id)"
        finally:
            stop_platform(platform, docker_client)


async def _follow(platform: Platform, seen: list[dict[str, Any]], user: str) -> None:
    async with paiq_client(platform.api) as client:
        async for event in client.events(user, since="0", reconnect=True):  # the whole journal: a fresh platform
            seen.append(event)


async def _settled(seen: list[dict[str, Any]], hooks: Hooks, limit_s: float = 90) -> None:
    """Until the stream brought every job's end and the webhook was told of each (both come after the API
    shows a job final: the journal's relay and the notifier follow the change)."""
    for _ in range(int(limit_s * 5)):
        ended = {e["subject"].split("~")[1] for e in seen if e["type"] == "job.completed"}
        told = {r.body["data"]["jobId"].split("~")[1] for r in hooks.received["ends"]}
        if len(ended) >= JOBS and len(told) >= JOBS:
            return
        await asyncio.sleep(0.2)
    # what is missing is said by the assertions that follow

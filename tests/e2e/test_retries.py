"""OpenPAI's retry policy end to end: retries that explain themselves and counters kept apart."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest

from services.cli.client import PaiqClient
from tests.e2e.conftest import job_config
from tests.infra import HostListener, Platform, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


class AttemptCounter(HostListener):
    """Answers each connection with its number: 1, 2, 3, ..."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    async def _on_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.count += 1
        writer.write(f"{self.count}\n".encode())
        await writer.drain()
        writer.close()


async def test_a_task_that_fails_twice_then_succeeds_ends_succeeded_after_two_retries(
        api: PaiqClient, user: str) -> None:
    async with AttemptCounter() as counter:
        command = (f"n=$(nc $PAI_CONTAINER_HOST_IP {counter.port} </dev/null); echo attempt $n; "
                   "if [ \"$n\" -lt 3 ]; then exit 3; fi")
        await api.submit(user, json.dumps(job_config("flaky", command=command, retryCount=2)).encode())
        seen_reasons: list[str] = []
        for _ in range(600):
            status = (await api.job(user, "flaky"))["jobStatus"]
            if status["subState"] == "retry pending" and status["reason"] not in seen_reasons:
                seen_reasons.append(status["reason"])
            if status["state"] in ("SUCCEEDED", "FAILED", "STOPPED"):
                break
            await asyncio.sleep(0.1)
        detail, _ = await wait_final(api, user, "flaky")

    status = detail["jobStatus"]
    assert status["state"] == "SUCCEEDED", status
    assert counter.count == 3
    assert status["retries"] == 2
    assert status["retryDetails"] == {"user": 2, "platform": 0, "resource": 0}
    assert seen_reasons, "a retrying job says why it waits again"
    assert "failed with exit 3" in seen_reasons[0] and "of 2 allowed" in seen_reasons[0]
    attempts = status["attempts"]
    assert [a["attempt"] for a in attempts] == [0, 1]
    assert all(a["exitCode"] == 3 and a["exitType"] == "USER_FAILURE" for a in attempts)


def pull_failures(platform: Platform) -> float:
    """The node's ``paiq_launch_failures_total{reason="image_pull"}`` as its launcher exports it (paiq up:
    on the API's /metrics, one process)."""
    url = platform.ops.get("launcher", platform.api) + "/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    wanted = f'paiq_launch_failures_total{{node="{platform.node_id}",reason="image_pull"}} '
    return sum(float(line[len(wanted):]) for line in text.splitlines() if line.startswith(wanted))


async def test_a_permanent_failure_is_not_retried(api: PaiqClient, user: str, platform: Platform) -> None:
    config = job_config("never-again", command="true", image="127.0.0.1:1/nowhere/nothing:1", retryCount=3)
    before = await asyncio.to_thread(pull_failures, platform)
    await api.submit(user, json.dumps(config).encode())
    detail, states = await wait_final(api, user, "never-again")
    status = detail["jobStatus"]
    assert status["state"] == "FAILED" and status["appExitCode"] == 254
    assert status["retries"] == 0 and status["attempts"] == []
    assert status["appExitSpec"]["phrase"] == "ImagePullFailed"
    assert status["appExitSpec"]["type"] == "USER_FAILURE"
    assert "RUNNING" not in states
    # the launch failure is counted where PaiqLaunchesFailing reads it
    assert await asyncio.to_thread(pull_failures, platform) == before + 1


async def test_a_retry_count_minus_2_job_starts_again_after_success_until_its_user_stops_it(
        api: PaiqClient, user: str) -> None:
    """retryCount -2 (frameworklauncher's normal policy, unlimited): a service. Its command exits 0, and
    the job starts it again, attempt after attempt, until the user stops the job."""
    async with AttemptCounter() as counter:
        command = f"nc $PAI_CONTAINER_HOST_IP {counter.port} </dev/null; exit 0"
        await api.submit(user, json.dumps(job_config("service", command=command, retryCount=-2)).encode())
        status: dict[str, object] = {}
        for _ in range(600):
            status = (await api.job(user, "service"))["jobStatus"]
            assert status["state"] not in ("SUCCEEDED", "FAILED", "STOPPED"), status
            if isinstance(status["attempt"], int) and status["attempt"] >= 1 and counter.count >= 2:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"no second attempt ran: {status}")
        await api.stop(user, "service")
        detail, _ = await wait_final(api, user, "service")

    status = detail["jobStatus"]
    assert status["state"] == "STOPPED" and status["appExitCode"] == -210, status
    assert status["retryDetails"]["user"] >= 1 and status["retryDetails"]["platform"] == 0
    attempts = status["attempts"]
    assert attempts and all(a["exitCode"] == 0 and a["exitType"] == "USER_SUCCESS" for a in attempts)

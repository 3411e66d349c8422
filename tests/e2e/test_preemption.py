"""Borrowing and preemption on the real platform (four services over RabbitMQ, MongoDB-wire, Docker): two
VCs of 50% on a node of 4 declared GPUs. A ``prod`` job of VC b borrows a's idle GPUs; a job of VC a
arrives; the pass that first judges it preempts the borrower; a's job starts once the borrower's container
is gone; the borrower waits saying why, with its retry counted as a platform retry, and resumes when
capacity frees. An ``oppo`` job is preempted before any ``test`` job."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import docker
import pytest

from services.cli.client import PaiqClient, paiq_client
from tests.e2e.conftest import job_config, logged_in
from tests.e2e.feedwatch import connected_feed
from tests.infra import ADMIN_PASSWORD, ADMIN_USER, Platform, start_platform, stop_platform, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

HALF = {"cpus": 50, "memory": 50, "gpus": 50}


@pytest.fixture(scope="module")
def gpu_platform(tmp_path_factory: pytest.TempPathFactory, mongo_uri: str, amqp_url: str,
                 docker_client: docker.DockerClient) -> Iterator[Platform]:
    """One node of 8 CPUs and 4 declared V100s (counted and placed; the engine has no GPU to pass)."""
    p = start_platform("separate", tmp_path_factory.mktemp("preempt"), mongo_uri=mongo_uri, amqp_url=amqp_url,
                       PAIQ_NODE_CPUS="8", PAIQ_NODE_MEMORY_MB="16384", PAIQ_NODE_GPUS="4xV100",
                       PAIQ_GPU_DEVICES="none", PAIQ_RECONCILE_SECONDS="1")
    try:
        yield p
    finally:
        stop_platform(p, docker_client)


@pytest.fixture
async def clients(gpu_platform: Platform, user: str) -> AsyncIterator[tuple[PaiqClient, PaiqClient]]:
    async with paiq_client(gpu_platform.api) as anonymous:
        admin = anonymous.with_token((await anonymous.login(ADMIN_USER, ADMIN_PASSWORD))["token"])
        a, b = f"a{user[-6:]}", f"b{user[-6:]}"
        await admin.put_virtual_cluster(a, HALF, ["*"])
        await admin.put_virtual_cluster(b, HALF, ["*"], borrowing={"gpus": 50})
        yield admin, await logged_in(admin, user)
        await admin.delete_virtual_cluster(a)
        await admin.delete_virtual_cluster(b)


def gpu_job(name: str, vc: str, gpus: int, priority: str, command: str) -> bytes:
    return json.dumps(job_config(name, command=command, virtualCluster=vc,
                                 extras={"hivedScheduler": {"jobPriorityClass": priority}}, roles=[
        {"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128, "gpuNumber": gpus,
         "command": command}])).encode()


async def until(api: PaiqClient, user: str, name: str, predicate: Callable[[dict[str, Any]], bool],
                limit_s: float = 60) -> dict[str, Any]:
    status: dict[str, Any] = {}
    for _ in range(int(limit_s * 10)):
        status = (await api.job(user, name))["jobStatus"]
        if predicate(status):
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"{name} never reached the expected state: {status}")


def metric(url: str, name: str, labels: dict[str, str]) -> float:
    text = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name}{{{want}}} in the metrics")


async def test_a_borrower_is_preempted_for_its_lender_and_resumes_as_a_platform_retry(
        gpu_platform: Platform, clients: tuple[PaiqClient, PaiqClient], user: str) -> None:
    admin, api = clients
    a, b = f"a{user[-6:]}", f"b{user[-6:]}"
    await api.submit(user, gpu_job("borrower", b, 4, "prod", "sleep 300"))
    await until(api, user, "borrower", lambda s: s["state"] == "RUNNING")
    vcs = await admin.virtual_clusters()
    assert vcs[b]["borrowed"]["gpus"] == 2 and vcs[a]["lent"]["gpus"] == 2, "b runs 2 of a's GPUs"
    assert vcs[b]["borrowing"]["gpus"] == 50

    seen: list[dict[str, Any]] = []
    feed = await connected_feed(gpu_platform.api, seen, user=user)  # connected before the job exists
    try:
        await api.submit(user, gpu_job("owner", a, 2, "test", "sleep 2"))
        owner, _ = await wait_final(api, user, "owner")
    finally:
        feed.cancel()
    assert owner["jobStatus"]["state"] == "SUCCEEDED"
    owner_id = next(e["subject"] for e in seen if e["type"] == "job.submitted")
    preempted = [e for e in seen if e["type"] == "job.preempted"]
    assert [(e["data"]["by_job_id"], e["data"]["reason"]) for e in preempted] == [
        (owner_id, f"borrowed capacity of vc {a}")]
    first_wait = next(e for e in seen if e["type"] == "job.waiting" and e["subject"] == owner_id)
    assert first_wait["data"]["reason"].startswith("preempting 1 job: "), "preempted by the pass that judged it"

    detail = await api.job(user, "borrower")
    [stopped] = detail["jobStatus"]["attempts"]
    assert stopped["exitCode"] == -1004 and stopped["exitPhrase"] == "ContainerPreempted"
    assert stopped["exitReason"] == f"preempted by job {owner_id} (test, vc {a}): borrowed capacity of vc {a}"
    assert stopped["completedTime"] <= owner["jobStatus"]["appLaunchedTime"], "a's job started once it was gone"
    resumed = await until(api, user, "borrower", lambda s: s["state"] == "RUNNING" and s["retries"] == 1)
    assert resumed["retryDetails"] == {"user": 0, "platform": 1, "resource": 0}
    assert metric(gpu_platform.ops["scheduler"], "paiq_preemptions_total", {"vc": b, "by_vc": a}) == 1
    await api.stop(user, "borrower")
    await wait_final(api, user, "borrower")


async def test_the_borrower_waits_saying_why_while_its_lender_uses_its_quota(
        clients: tuple[PaiqClient, PaiqClient], user: str) -> None:
    _, api = clients
    a, b = f"a{user[-6:]}", f"b{user[-6:]}"
    await api.submit(user, gpu_job("lender", a, 2, "test", "sleep 300"))
    await until(api, user, "lender", lambda s: s["state"] == "RUNNING")
    await api.submit(user, gpu_job("greedy", b, 4, "prod", "true"))
    waiting = await until(api, user, "greedy", lambda s: "borrow" in s.get("reason", ""))
    assert waiting["state"] == "WAITING"
    assert waiting["reason"].endswith(
        f"virtual cluster {b} would borrow 2 GPUs beyond its quota but the other virtual clusters leave 0 idle")
    await api.stop(user, "lender")
    done, _ = await wait_final(api, user, "greedy")
    assert done["jobStatus"]["state"] == "SUCCEEDED", "it starts when its lender's GPUs are idle again"


async def test_an_opportunistic_job_is_preempted_before_any_test_job(
        clients: tuple[PaiqClient, PaiqClient], user: str) -> None:
    _, api = clients
    a, b = f"a{user[-6:]}", f"b{user[-6:]}"
    await api.submit(user, gpu_job("keeper", a, 1, "test", "sleep 300"))
    await until(api, user, "keeper", lambda s: s["state"] == "RUNNING")
    await api.submit(user, gpu_job("scavenger", b, 3, "oppo", "sleep 300"))  # beyond b's quota: oppo counts in none
    await until(api, user, "scavenger", lambda s: s["state"] == "RUNNING")
    await api.submit(user, gpu_job("urgent", a, 1, "prod", "true"))
    done, _ = await wait_final(api, user, "urgent")
    assert done["jobStatus"]["state"] == "SUCCEEDED"
    scavenger = await api.job(user, "scavenger")
    assert scavenger["jobStatus"]["retryDetails"]["platform"] == 1
    keeper = (await api.job(user, "keeper"))["jobStatus"]
    assert keeper["state"] == "RUNNING" and keeper["retries"] == 0, "the test job kept running"
    for name in ("keeper", "scavenger"):
        await api.stop(user, name)
        await wait_final(api, user, name)

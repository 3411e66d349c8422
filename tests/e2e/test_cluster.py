"""Scheduling a real (small) cluster: three launcher agents on this Docker host, each its own node."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import docker
import pytest

from services.cli.client import ApiCallError, PaiqClient, paiq_client
from tests.e2e.conftest import job_config, logged_in
from tests.infra import (
    ADMIN_PASSWORD,
    ADMIN_USER,
    Platform,
    start_extra_launcher,
    start_extra_process,
    start_platform,
    stop_platform,
    wait_final,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

RANGES = {"a": (26000, 26009), "b": (26100, 26109), "c": (26200, 26209)}  # below the ephemeral ports


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, mongo_uri: str, amqp_url: str,
            docker_client: docker.DockerClient) -> Iterator[tuple[Platform, dict[str, subprocess.Popen[bytes]]]]:
    """Node ``<platform>`` plus two more; each 2 CPUs, 2 declared V100s and its own port range."""
    small = {"PAIQ_NODE_CPUS": "2", "PAIQ_NODE_GPUS": "2xV100", "PAIQ_NODE_TIMEOUT_SECONDS": "8",
             "PAIQ_RECONCILE_SECONDS": "1", "PAIQ_LEASE_SECONDS": "3"}
    p = start_platform("separate", tmp_path_factory.mktemp("cluster"), mongo_uri=mongo_uri, amqp_url=amqp_url,
                       PAIQ_NODE_PORT_RANGE="{}-{}".format(*RANGES["a"]), **small)
    extra = {name: start_extra_launcher(p, f"{p.node_id}-{name}", "{}-{}".format(*RANGES[name]), **small)
             for name in ("b", "c")}
    try:
        yield p, extra
    finally:
        stop_platform(p, docker_client)


@pytest.fixture
async def api(cluster: tuple[Platform, dict[str, subprocess.Popen[bytes]]], user: str) -> AsyncIterator[PaiqClient]:
    platform, _ = cluster
    async with paiq_client(platform.api) as anonymous:
        admin = anonymous.with_token((await anonymous.login(ADMIN_USER, ADMIN_PASSWORD))["token"])
        await _wait_nodes(admin, 3)
        yield await logged_in(admin, user)


async def _wait_nodes(client: PaiqClient, count: int) -> None:
    for _ in range(100):
        vcs = await client.virtual_clusters()
        if sum(vc["capacity"]["cpus"] for vc in vcs.values()) >= 2 * count - 1:  # quotas round down
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{count} nodes did not register")


def spread_job(name: str, command: str, tasks: int = 3, **extra: object) -> bytes:
    role = {"name": "w", "taskNumber": tasks, "cpuNumber": 2, "memoryMB": 128, "command": command,
            "portList": [{"label": "http", "beginAt": 0, "portNumber": 1}]}
    return json.dumps(job_config(name, command=command, roles=[role], **extra)).encode()


async def _until(api: PaiqClient, user: str, name: str, predicate: object, limit_s: float = 60) -> dict[str, object]:
    for _ in range(int(limit_s * 10)):
        status = (await api.job(user, name))["jobStatus"]
        if predicate(status):  # type: ignore[operator]
            return dict(status)
        await asyncio.sleep(0.1)
    raise AssertionError(f"{name} never reached the expected state: {status}")


async def test_a_gang_job_spreads_over_the_nodes_with_ports_from_each_nodes_range(
        api: PaiqClient, user: str) -> None:
    await api.submit(user, spread_job("spread", "true"))
    detail, _ = await wait_final(api, user, "spread")
    tasks = detail["taskRoles"]["w"]["taskStatuses"]
    assert detail["jobStatus"]["state"] == "SUCCEEDED"
    nodes = {t["containerNodeId"] for t in tasks}
    assert len(nodes) == 3, "2 CPUs per node: one task per node"
    for t in tasks:
        suffix = t["containerNodeId"].rsplit("-", 1)[-1]
        lo, hi = RANGES.get(suffix, RANGES["a"])
        assert lo <= int(t["containerPorts"]["http"]) <= hi


async def test_a_job_that_does_not_fit_waits_with_its_reason_and_starts_when_capacity_frees(
        api: PaiqClient, user: str) -> None:
    await api.submit(user, spread_job("first", "sleep 3"))
    await _until(api, user, "first", lambda s: s["state"] == "RUNNING")
    await api.submit(user, spread_job("second", "true", tasks=1))
    waiting = await _until(api, user, "second", lambda s: "fits on no node" in s.get("reason", ""))
    assert waiting["state"] == "WAITING" and waiting["subState"] == "queued"
    assert "3 nodes lack 2 free CPUs" in str(waiting["reason"])
    assert str(waiting["reason"]).startswith("position 1 in virtual cluster default's queue")
    first, _ = await wait_final(api, user, "first")
    second, _ = await wait_final(api, user, "second")
    assert second["jobStatus"]["state"] == "SUCCEEDED"
    assert second["jobStatus"]["appLaunchedTime"] >= first["jobStatus"]["appCompletedTime"]


async def test_virtual_clusters_admit_only_their_users_and_hold_jobs_to_their_quota(
        cluster: tuple[Platform, dict[str, subprocess.Popen[bytes]]], user: str) -> None:
    platform, _ = cluster
    async with paiq_client(platform.api) as anonymous:
        admin = anonymous.with_token((await anonymous.login(ADMIN_USER, ADMIN_PASSWORD))["token"])
        member = await logged_in(admin, user)
        outsider_name = f"{user}-out"
        outsider = await logged_in(admin, outsider_name)
        team = f"team{user[-6:]}"
        await admin.put_virtual_cluster(team, {"cpus": 34, "memory": 50, "gpus": 50}, [user])
        vcs = await member.virtual_clusters()
        assert vcs[team]["quota"]["cpus"] == 34 and vcs[team]["capacity"]["cpus"] == 2
        assert vcs["default"]["quota"]["cpus"] == 66
        with pytest.raises(ApiCallError) as refused:
            await outsider.submit(outsider_name, spread_job("sneak", "true", tasks=1, virtualCluster=team))
        assert refused.value.status == 403 and f"may not use virtual cluster {team}" in refused.value.message
        await member.submit(user, spread_job("in-quota", "sleep 2", tasks=1, virtualCluster=team))
        await member.submit(user, spread_job("over-quota", "true", tasks=1, virtualCluster=team))
        waiting = await _until(member, user, "over-quota", lambda s: "quota" in s.get("reason", ""))
        assert f"virtual cluster {team} would exceed its quota" in str(waiting["reason"])
        assert waiting["queuePosition"] == 1
        done, _ = await wait_final(member, user, "over-quota")
        assert done["jobStatus"]["state"] == "SUCCEEDED", "it starts once the first job frees the quota"
        assert "deleted" in (await admin.delete_virtual_cluster(team))["message"]


async def test_a_standby_scheduler_takes_over_when_the_leader_dies(
        api: PaiqClient, user: str, cluster: tuple[Platform, dict[str, subprocess.Popen[bytes]]]) -> None:
    platform, _ = cluster
    leader = platform.procs[1]  # start_platform starts status, scheduler, launcher, submit in that order
    assert leader.args[-1] == "services.scheduler"  # type: ignore[index]
    standby = start_extra_process(platform, "scheduler-standby", "services.scheduler")
    await _logged(platform.workdir / "scheduler-standby.log", "standing by: another scheduler holds the lease")
    leader.send_signal(signal.SIGKILL)
    leader.wait(10)
    await api.submit(user, spread_job("after-failover", "true", tasks=1))
    detail, _ = await wait_final(api, user, "after-failover", limit_s=60)
    assert detail["jobStatus"]["state"] == "SUCCEEDED"
    assert "this scheduler leads now" in (platform.workdir / "scheduler-standby.log").read_text()
    assert standby.poll() is None


async def _logged(log: Path, line: str, limit_s: float = 20) -> None:
    """Wait until a process's log says ``line``."""
    def said() -> bool:
        return log.exists() and line in log.read_text()

    for _ in range(int(limit_s / 0.1)):
        if await asyncio.to_thread(said):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{log.name} did not say {line!r} within {limit_s}s")


async def test_a_leader_frozen_past_its_lease_books_nothing_twice(
        api: PaiqClient, user: str, cluster: tuple[Platform, dict[str, subprocess.Popen[bytes]]]) -> None:
    platform, _ = cluster
    schedulers = [p for p in platform.procs if p.args[-1] == "services.scheduler" and p.poll() is None]  # type: ignore[index]
    fresh = start_extra_process(platform, "scheduler-fresh", "services.scheduler")
    fresh_log = platform.workdir / "scheduler-fresh.log"
    await _logged(fresh_log, "standing by: another scheduler holds the lease")
    for proc in schedulers:
        proc.send_signal(signal.SIGSTOP)  # the leader stalls (a long GC pause, a frozen VM)
    try:
        await _logged(fresh_log, "this scheduler leads now")  # past PAIQ_LEASE_SECONDS (3)
        for i in range(3):  # each takes one node's 2 CPUs: the cluster is full
            await api.submit(user, spread_job(f"frozen-{i}", "sleep 30", tasks=1))
        for i in range(3):
            await _until(api, user, f"frozen-{i}", lambda s: s["subState"] != "queued")
    finally:
        for proc in schedulers:
            proc.send_signal(signal.SIGCONT)  # it wakes with its old view and its old lease
    await api.submit(user, spread_job("frozen-extra", "true", tasks=1))
    # The anchors: the old leader renewed (and lost) its lease, and the new one has looked at the extra
    # job; whatever the old leader's passes would book, they had the chance to.
    for _ in range(200):
        said = {log.name: log.read_text() for log in platform.workdir.glob("scheduler*.log")
                if log.name != "scheduler-fresh.log"}
        extra = (await api.job(user, "frozen-extra"))["jobStatus"]
        if any("lost the scheduler lease; standing by" in text for text in said.values()) \
                and "lack 2 free CPUs" in str(extra["reason"]):
            break
        await asyncio.sleep(0.1)
    assert any("lost the scheduler lease; standing by" in text for text in said.values()), \
        "the old leader stood by once it saw the lease gone"
    assert all(proc.poll() is None for proc in schedulers), "losing the lease stops the work, not the process"
    assert fresh.poll() is None and "this scheduler leads now" in (platform.workdir / "scheduler-fresh.log").read_text()
    extra = (await api.job(user, "frozen-extra"))["jobStatus"]
    assert extra["subState"] == "queued" and "lack 2 free CPUs" in str(extra["reason"]), "nothing is free"
    nodes = {}
    for i in range(3):
        [task] = (await api.job(user, f"frozen-{i}"))["taskRoles"]["w"]["taskStatuses"]
        nodes[task["containerNodeId"]] = nodes.get(task["containerNodeId"], 0) + 1
    assert sorted(nodes.values()) == [1, 1, 1], f"each node's CPUs given once: {nodes}"
    for i in range(3):
        await api.stop(user, f"frozen-{i}")
    await api.stop(user, "frozen-extra")


async def test_a_killed_agents_tasks_end_with_node_lost_and_are_retried_without_using_retry_count(
        api: PaiqClient, user: str, cluster: tuple[Platform, dict[str, subprocess.Popen[bytes]]]) -> None:
    platform, extra = cluster
    await api.submit(user, spread_job("survivor", "sleep 60", retryCount=0))
    running = await _until(api, user, "survivor", lambda s: s["state"] == "RUNNING")
    # A node declared lost before the kill (its launcher starved past the node timeout on a loaded machine)
    # would have retried the job already: the likeliest reading of a CI run, with a 4 s timeout then, where the
    # job was RUNNING with one platform retry just after the kill.
    assert running["retryDetails"]["platform"] == 0, running  # type: ignore[index]
    extra["c"].send_signal(signal.SIGKILL)
    extra["c"].wait(10)
    pending = await _until(api, user, "survivor", lambda s: s["retryDetails"]["platform"] == 1, limit_s=30)
    assert pending["state"] == "WAITING" and "exit -1001 (NodeLost" in str(pending["reason"])
    # The attempt is over once its tasks on the live nodes are stopped too; then the next one queues.
    retried = await _until(api, user, "survivor", lambda s: len(s["attempts"]) == 1, limit_s=30)
    assert retried["retryDetails"] == {"user": 0, "platform": 1, "resource": 0}
    [past] = retried["attempts"]  # type: ignore[misc]
    assert past["exitCode"] == -1001 and past["exitPhrase"] == "NodeLost"
    assert f"node {platform.node_id}-c was lost" in past["exitReason"]
    lost_task = [t for t in past["taskStatuses"] if t["containerNodeId"] == f"{platform.node_id}-c"]
    assert [t["containerExitCode"] for t in lost_task] == [-1001]
    # Two nodes are left for a three-node gang job: the next attempt waits, saying why.
    waiting = await _until(api, user, "survivor", lambda s: "fits on no node" in s.get("reason", ""), limit_s=30)
    assert "fits on no node: 2 nodes lack 2 free CPUs" in str(waiting["reason"])
    await api.stop(user, "survivor")
    detail, _ = await wait_final(api, user, "survivor")
    assert detail["jobStatus"]["state"] == "STOPPED"

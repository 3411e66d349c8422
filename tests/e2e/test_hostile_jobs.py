"""A tenant's job attacks the platform and its neighbours from inside its container, in both shapes, on the
default (bridge) task network: every attempt fails (issue: hostile tenants).

Bob's job probes, from inside its container (tests/hostile.py):
- every TCP port the platform's processes listen on (the embedded database, the API, the ops ports; in
  the separate shape also the MongoDB-wire server and the RabbitMQ node the services use), at loopback, at
  its node's address and at every other address of the host: all closed;
- the database's wire protocol at each of those: an unauthenticated ``find`` of every job's SSH keys and an
  ``insert`` of a forged administrator token get nothing (no answer at all, or an Unauthorized one);
- the Docker socket and the host's data directory (its database login, its secrets key): absent;
- Alice's task running beside it: its processes and files are not seen, its port that is not declared is
  closed (at her container's own address on the task network and at the node's), and only the port her
  job declares answers (the control that shows the probe reaches what it should);
- the SSH keys in its container are its own job's, and no other job's private key is in its output.
The resource abuses a tenant commits by accident: a fork bomb (pids limit), a disk filler (stopped, -1206),
a gigabyte-class log flood (stored log capped, the node keeps up) and a task that ignores SIGTERM (killed
after the grace): each leaves another user's job on the node running to its right outcome.
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from services.cli.client import PaiqClient
from tests.e2e.conftest import job_config, logged_in
from tests.hostile import answer, host_addresses, listening_ports, results, write_probe
from tests.infra import Platform, start_platform, stop_platform, unique, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

PIDS_LIMIT = 128
DISK_LIMIT_MB = 64
LOG_CAP = 1024 * 1024


@pytest.fixture(scope="module", params=["all-in-one", "separate"])
def platform(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, mongo_uri: str,
             amqp_url: str, docker_client: docker.DockerClient) -> Iterator[Platform]:
    shape = str(request.param)
    p = start_platform(shape, tmp_path_factory.mktemp(f"hostile-{shape}"), mongo_uri=mongo_uri, amqp_url=amqp_url,
                       PAIQ_TASK_PIDS_LIMIT=str(PIDS_LIMIT), PAIQ_TASK_DISK_MB=str(DISK_LIMIT_MB),
                       PAIQ_TASK_DISK_CHECK_SECONDS="1", PAIQ_TASK_LOG_MAX_BYTES=str(LOG_CAP))
    try:
        yield p
    finally:
        stop_platform(p, docker_client)


async def running_task(api: PaiqClient, user: str, name: str, limit_s: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        detail = await api.job(user, name)
        tasks = [t for r in detail["taskRoles"].values() for t in r["taskStatuses"]]
        if tasks and all(t["taskState"] == "RUNNING" for t in tasks):
            return dict(tasks[0])
        assert detail["jobStatus"]["state"] not in {"SUCCEEDED", "FAILED", "STOPPED"}, json.dumps(detail)[:2000]
        await asyncio.sleep(0.25)
    raise AssertionError(f"{user}~{name} never ran: {json.dumps(detail)[:2000]}")


async def log_of(api: PaiqClient, user: str, name: str) -> str:
    return "".join([line async for line in api.task_log(user, name, "main", 0)])  # each line ends with its \n


def platform_targets(platform: Platform, mongo_uri: str, amqp_url: str) -> tuple[set[int], set[int]]:
    """Every port the platform serves, and those of them that speak MongoDB's wire protocol."""
    ports = listening_ports(p.pid for p in platform.procs)
    databases = {port for port in ports if port not in {int(platform.env["PAIQ_API_PORT"])}}
    if platform.shape == "separate":  # the services' database and broker, which the tests run for them
        db_port, broker_port = urllib.parse.urlsplit(mongo_uri).port, urllib.parse.urlsplit(amqp_url).port
        assert db_port and broker_port
        ports |= {db_port, broker_port}
        databases = {db_port}
    else:
        databases = {p for p in databases if _speaks_mongo(p)}
    assert databases, f"no database port found among {sorted(ports)}"
    return ports, databases


def _speaks_mongo(port: int) -> bool:
    import socket

    from tests.hostile import op_msg
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(op_msg({"ping": 1, "$db": "admin"}, request_id=77))
            reply = s.recv(4096)
    except OSError:
        return False
    return len(reply) > 16 and struct.unpack("<iiii", reply[:16])[2:] == (77, 2013)  # an OP_MSG answering ours


async def test_a_job_reaches_nothing_of_the_platform_nor_of_its_neighbour(
        platform: Platform, admin: PaiqClient, mongo_uri: str, amqp_url: str,
        docker_client: docker.DockerClient) -> None:
    alice, bob = unique("alice"), unique("bob")
    alice_api, bob_api = await logged_in(admin, alice), await logged_in(admin, bob)
    tag = unique("")
    neighbour_command = (
        f"echo alice-secret > /tmp/alice-secret-{tag}; "
        "(while true; do echo alice-private | nc -l -p 7777; done) & "
        "(while true; do echo alice-public | nc -l -p $PAI_CONTAINER_HOST_http_PORT_LIST; done) & "
        f"exec sleep 600 # alice-marker-{tag}")
    neighbour = job_config("neighbour", command=neighbour_command, roles=[{
        "name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128,
        "portList": [{"label": "http", "beginAt": 0, "portNumber": 1}], "command": neighbour_command}])
    await alice_api.submit(alice, json.dumps(neighbour).encode())
    alice_task = await running_task(alice_api, alice, "neighbour")
    node_ip, alice_port = alice_task["containerIp"], alice_task["containerPorts"]["http"]
    container = docker_client.containers.get(alice_task["containerId"])
    alice_ip = next(iter(container.attrs["NetworkSettings"]["Networks"].values()))["IPAddress"]
    alice_key = await alice_api.key_file(alice, "neighbour", f"{alice}~neighbour")

    ports, databases = platform_targets(platform, mongo_uri, amqp_url)
    addresses = sorted({"127.0.0.1", node_ip, *host_addresses()})
    data_dir = platform.env["PAIQ_DATA_DIR"]
    database = platform.env.get("PAIQ_MONGODB_DATABASE", "paiq")
    write_probe(Path(data_dir) / "fs" / "probes" / bob, database)
    env = {"TARGETS": " ".join(f"{a}:{p}" for a in addresses for p in sorted(ports)),
           "DATABASES": " ".join(f"{a}:{p}" for a in addresses for p in sorted(databases)),
           "DATA_DIR": data_dir, "NEIGHBOUR_IP": alice_ip, "NODE_IP": node_ip, "NEIGHBOUR_PORT": str(alice_port)}
    probe = job_config("probe", command="sh /pai/code/probe.sh", codeDir=f"$PAI_DEFAULT_FS_URI/probes/{bob}",
                       jobEnvs=env)
    await bob_api.submit(bob, json.dumps(probe).encode())
    detail, _ = await wait_final(bob_api, bob, "probe", 200)
    assert detail["jobStatus"]["state"] == "SUCCEEDED", json.dumps(detail)[:2000]
    log = await log_of(bob_api, bob, "probe")
    seen = results(log)
    assert seen.get("done") == "yes", log[-3000:]

    opened = {name: v for name, v in seen.items() if name.startswith("port-") and v != "closed"}
    assert not opened, f"a job reached the platform's ports: {opened} (of {len(ports)} ports at {addresses})"
    for name, value in seen.items():
        if name.startswith(("find-", "insert-")):
            said = answer(value)
            assert said is None or (said.get("ok") == 0 and said.get("code") == 13), f"{name}: {said}"
    assert not await _forged_token(platform, mongo_uri, database), "the forged token was stored"
    for path in ("/var/run/docker.sock", "/run/docker.sock", data_dir, f"{data_dir}/db-login.json",
                 f"{data_dir}/secrets.key"):
        assert seen[f"path-{path}"] == "absent", path
    assert (seen["processes"], seen["files"]) == ("0", "0"), "the neighbour's processes or files were seen"
    assert seen["neighbour-private"] == "none", "the neighbour's undeclared port answered at her address"
    assert seen["neighbour-private-at-node"] == "none", "the neighbour's undeclared port answered at the node"
    assert seen["neighbour-public"] == "alice-public", "the control: her declared port must answer"
    key_body = "".join(line for line in alice_key.splitlines() if "PRIVATE KEY" not in line)[:60]
    assert key_body and key_body not in log and alice_key.strip() not in log
    assert "neighbour" not in seen["ssh-files"] and f"{bob}~probe" in seen["ssh-files"], seen["ssh-files"]
    await alice_api.stop(alice, "neighbour")


async def _forged_token(platform: Platform, mongo_uri: str, database: str) -> bool:
    from pymongo import AsyncMongoClient

    from tests.infra import embedded_database_uri
    uri = embedded_database_uri(platform) if platform.shape == "all-in-one" else mongo_uri
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
    try:
        return await client[database].tokens.find_one({"_id": "forged-by-a-job"}) is not None
    finally:
        await client.close()


async def _removed(docker_client: docker.DockerClient, container_id: str, limit_s: float = 20) -> None:
    """The container is removed once its exit is reported (a moment after the job's state says it ended)."""
    deadline = time.monotonic() + limit_s
    while docker_client.containers.list(all=True, filters={"id": container_id}):
        assert time.monotonic() < deadline, f"container {container_id[:12]} still there {limit_s:.0f} s on"
        await asyncio.sleep(0.25)


VICTIM = "for i in 1 2 3 4 5 6; do sleep 1; done; echo victim-ok"


async def _victim(admin: PaiqClient) -> tuple[PaiqClient, str]:
    carol = unique("carol")
    api = await logged_in(admin, carol)
    await api.submit(carol, json.dumps(job_config("victim", command=VICTIM)).encode())
    return api, carol


async def _victim_succeeded(api: PaiqClient, user: str) -> None:
    detail, _ = await wait_final(api, user, "victim", 120)
    assert detail["jobStatus"]["state"] == "SUCCEEDED", json.dumps(detail)[:2000]
    assert "victim-ok" in await log_of(api, user, "victim")


async def _pids_stats(docker_client: docker.DockerClient, container_id: str, limit_s: float = 15) -> dict[str, Any]:
    """The container's process count as the engine reports it. A loaded engine's one-shot sample can come back
    without it (once, in a full run), so it is asked again; a container that is no longer running fails with
    its state, which is what a missing count would then mean."""
    deadline = time.monotonic() + limit_s
    while True:
        stats = docker_client.api.stats(container_id, stream=False)
        if "current" in stats.get("pids_stats", {}):
            return dict(stats["pids_stats"])
        state = docker_client.api.inspect_container(container_id)["State"]
        assert state["Running"] and time.monotonic() < deadline, (stats.get("pids_stats"), state)
        await asyncio.sleep(0.5)


async def test_a_fork_bomb_stays_inside_its_pids_limit_and_its_neighbour_runs_on(
        platform: Platform, admin: PaiqClient, user: str, docker_client: docker.DockerClient) -> None:
    api = await logged_in(admin, user)
    # exec: the task itself needs no new process once the bomb holds them all (it runs until stopped)
    await api.submit(user, json.dumps(job_config("bomb", command="b() { b | b & }; b; exec sleep 600")).encode())
    task = await running_task(api, user, "bomb")
    victim_api, carol = await _victim(admin)
    await asyncio.sleep(3)  # the bomb at its limit
    pids = await _pids_stats(docker_client, task["containerId"])
    assert 0 < pids["current"] <= PIDS_LIMIT, pids
    assert pids.get("limit") in (None, PIDS_LIMIT)
    await _victim_succeeded(victim_api, carol)
    began = time.monotonic()
    await api.stop(user, "bomb")
    detail, _ = await wait_final(api, user, "bomb", 60)
    assert detail["jobStatus"]["state"] == "STOPPED" and time.monotonic() - began < 30
    await _removed(docker_client, task["containerId"])


async def test_a_task_filling_its_disk_is_stopped_saying_why_and_its_neighbour_runs_on(
        platform: Platform, admin: PaiqClient, user: str) -> None:
    api = await logged_in(admin, user)
    filler = "i=0; while true; do dd if=/dev/zero of=/tmp/fill$i bs=1M count=8 2>/dev/null; i=$((i+1)); sleep 0.1; done"
    await api.submit(user, json.dumps(job_config("filler", command=filler)).encode())
    victim_api, carol = await _victim(admin)
    detail, _ = await wait_final(api, user, "filler", 90)
    task = detail["taskRoles"]["main"]["taskStatuses"][0]
    assert detail["jobStatus"]["state"] == "FAILED", json.dumps(detail)[:2000]
    assert task["containerExitCode"] == -1206, task
    assert f"limit of {DISK_LIMIT_MB} MiB a task (PAIQ_TASK_DISK_MB)" in task["containerExitReason"], task
    assert detail["jobStatus"]["appExitSpec"]["phrase"] == "ContainerDiskLimitExceeded"
    await _victim_succeeded(victim_api, carol)


async def test_a_log_flood_is_stored_capped_while_the_node_keeps_up(platform: Platform, admin: PaiqClient,
                                                                    user: str) -> None:
    api = await logged_in(admin, user)
    flood = "yes paiq-flood-0123456789-abcdefghijklmnopqrstuvwxyz | head -c 268435456; echo; echo flood-done"
    await api.submit(user, json.dumps(job_config("flood", command=flood)).encode())
    await running_task(api, user, "flood")
    victim_api, carol = await _victim(admin)
    began = time.monotonic()
    await _victim_succeeded(victim_api, carol)
    assert time.monotonic() - began < 60, "a neighbour's 6 s job took over a minute beside the flood"
    detail, _ = await wait_final(api, user, "flood", 240)
    assert detail["jobStatus"]["state"] == "SUCCEEDED", json.dumps(detail)[:2000]
    log = await log_of(api, user, "flood")
    assert LOG_CAP / 2 < len(log.encode()) < LOG_CAP + 4096, len(log)
    assert "[paiq] log truncated" in log and "flood-done" not in log


async def test_a_task_that_ignores_sigterm_is_killed_after_the_grace(platform: Platform, admin: PaiqClient,
                                                                     user: str,
                                                                     docker_client: docker.DockerClient) -> None:
    api = await logged_in(admin, user)
    await api.submit(user, json.dumps(job_config(
        "stubborn", command="trap '' TERM; while true; do sleep 1; done")).encode())
    task = await running_task(api, user, "stubborn")
    grace = int(platform.env["PAIQ_STOP_GRACE_SECONDS"])
    began = time.monotonic()
    await api.stop(user, "stubborn")
    detail, _ = await wait_final(api, user, "stubborn", 60)
    assert detail["jobStatus"]["state"] == "STOPPED"  # at once, as OpenPAI's stop; its container goes after
    await _removed(docker_client, task["containerId"], grace + 15)
    took = time.monotonic() - began
    assert took >= grace, f"the container was gone {took:.1f} s after the stop, within its grace of {grace} s"


async def test_on_the_host_network_a_job_reaches_the_embedded_database_but_is_refused(
        tmp_path: Path, docker_client: docker.DockerClient) -> None:
    """host networking is the operator's choice, and exposes the host's loopback to tasks (docs, Security):
    the embedded database's login is then what keeps every job's keys and the tokens out of a task's reach."""
    p = start_platform("all-in-one", tmp_path, PAIQ_NODE_NETWORK="host")
    try:
        from services.cli.client import paiq_client
        from tests.infra import ADMIN_PASSWORD, ADMIN_USER
        async with paiq_client(p.api) as anonymous:
            admin = anonymous.with_token((await anonymous.login(ADMIN_USER, ADMIN_PASSWORD))["token"])
            bob = unique("bob")
            api = await logged_in(admin, bob)
            await api.submit(bob, json.dumps(job_config("keyholder", command="sleep 60")).encode())
            databases = {port for port in listening_ports(proc.pid for proc in p.procs) if _speaks_mongo(port)}
            write_probe(Path(p.env["PAIQ_DATA_DIR"]) / "fs" / "probes" / bob, "paiq")
            env = {"TARGETS": " ".join(f"127.0.0.1:{port}" for port in databases),
                   "DATABASES": " ".join(f"127.0.0.1:{port}" for port in databases),
                   "DATA_DIR": p.env["PAIQ_DATA_DIR"], "NEIGHBOUR_IP": "127.0.0.1", "NODE_IP": "127.0.0.1",
                   "NEIGHBOUR_PORT": "1"}
            await api.submit(bob, json.dumps(job_config(
                "probe", command="sh /pai/code/probe.sh", codeDir=f"$PAI_DEFAULT_FS_URI/probes/{bob}",
                jobEnvs=env)).encode())
            detail, _ = await wait_final(api, bob, "probe", 120)
            assert detail["jobStatus"]["state"] == "SUCCEEDED", json.dumps(detail)[:2000]
            seen = results(await log_of(api, bob, "probe"))
        [port] = databases
        assert seen[f"port-127.0.0.1:{port}"] == "open", "the premise: on the host network the port is reached"
        for what in ("find", "insert"):
            said = answer(seen[f"{what}-127.0.0.1:{port}"])
            assert said is not None and said.get("ok") == 0 and said.get("code") == 13, f"{what}: {said}"
        assert not await _forged_token(p, "", "paiq")
    finally:
        stop_platform(p, docker_client)

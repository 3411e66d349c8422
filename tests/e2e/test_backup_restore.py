"""Backup and restore of `paiq up`, as docs/operators/backup.md tells an operator to do it: stop paiq up, archive
its data directory, unpack the archive in another place and start paiq up there. Every job (a finished one and
one still running), its log, its SSH key pair, the users and their passwords are found again; the running job's
container is found again and the job still obeys a stop; the embedded database, the secrets key and the
database login came along in the archive (nothing else was needed)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import tarfile
from pathlib import Path

import docker
import pytest

from services.cli.client import PaiqClient, paiq_client
from tests.e2e.conftest import job_config
from tests.infra import ADMIN_PASSWORD, ADMIN_USER, Platform, start_platform, stop_platform, unique, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def _stop_gently(platform: Platform) -> None:
    """paiq up stopped as its supervisor stops it (SIGTERM), its tasks' containers left running."""
    for p in platform.procs:
        p.send_signal(signal.SIGTERM)
    for p in platform.procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"paiq up did not stop within 30 s of SIGTERM:\n{platform.logs()[-3000:]}")


async def _running(api: PaiqClient, user: str, name: str, limit_s: float = 60) -> dict[str, object]:
    for _ in range(int(limit_s / 0.5)):
        detail = await api.job(user, name)
        if detail["jobStatus"]["state"] == "RUNNING":
            return detail
        await asyncio.sleep(0.5)
    raise AssertionError(f"{name} not RUNNING within {limit_s} s: {detail['jobStatus']}")


async def test_paiq_up_backed_up_and_restored_elsewhere_finds_every_job_log_key_and_user(
        tmp_path: Path, docker_client: docker.DockerClient) -> None:
    user, password = unique("u"), "a-long-enough-password"
    first = start_platform("all-in-one", tmp_path / "first")
    node = first.node_id
    try:
        async with paiq_client(first.api) as anonymous:
            admin = anonymous.with_token((await anonymous.login(ADMIN_USER, ADMIN_PASSWORD))["token"])
            await admin.put_user(user, password)
            api = anonymous.with_token((await anonymous.login(user, password))["token"])
            await api.submit(user, json.dumps(job_config("done", command="echo kept-in-the-backup")).encode())
            done, _ = await wait_final(api, user, "done")
            assert done["jobStatus"]["state"] == "SUCCEEDED"
            await api.submit(user, json.dumps(job_config("long", command="sleep 600")).encode())
            await _running(api, user, "long")
            key_before = await api.key_file(user, "done", f"{user}~done")
            log_before = "".join([line async for line in api.task_log(user, "done", "main", 0)])
            assert "kept-in-the-backup" in log_before
        _stop_gently(first)

        archive = tmp_path / "paiq-backup.tar.gz"  # what the docs say to keep: the whole data directory
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(first.env["PAIQ_DATA_DIR"], arcname="data")
        elsewhere = tmp_path / "second"
        elsewhere.mkdir()
        with tarfile.open(archive) as tar:
            tar.extractall(elsewhere, filter="tar")

        # the same node (its engine runs the job's container) and task ports; its data: elsewhere/data
        second = start_platform("all-in-one", elsewhere, PAIQ_NODE_ID=node,
                                PAIQ_NODE_PORT_RANGE=first.env["PAIQ_NODE_PORT_RANGE"])
        assert second.env["PAIQ_DATA_DIR"] == str(elsewhere / "data")
        try:
            async with paiq_client(second.api) as anonymous:
                api = anonymous.with_token((await anonymous.login(user, password))["token"])
                names = {j["name"]: j["state"] for j in await api.jobs(user)}
                assert names.keys() == {"done", "long"}
                assert names["done"] == "SUCCEEDED"
                assert await api.key_file(user, "done", f"{user}~done") == key_before
                assert "".join([line async for line in api.task_log(user, "done", "main", 0)]) == log_before
                await _running(api, user, "long")  # its container, found again on the same node
                await api.stop(user, "long")
                stopped, _ = await wait_final(api, user, "long")
                assert stopped["jobStatus"]["state"] == "STOPPED"
        finally:
            stop_platform(second, docker_client)
    finally:
        for c in docker_client.containers.list(all=True, filters={"label": f"paiq.node={node}"}):
            c.remove(force=True)
        stop_platform(first, docker_client)

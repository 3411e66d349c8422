"""Every credential a job carries is sealed at rest (issue 35), seen on disk: a ``paiq up`` whose embedded
database lives in its data directory runs a protocol v2 job with a known secret and a registry password,
its owner downloads the job's SSH private key, and then no file under the data directory (the database's
files, its journal and log, paiq's own files) holds the private key's base64 body, a line of it, the
secret or the password, read as bytes. The task saw the right secret and the right key meanwhile.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from services.cli.client import PaiqClient
from tests.infra import Platform, start_platform, stop_platform, unique, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory, docker_client: docker.DockerClient) -> Iterator[Platform]:
    """``paiq up`` as a user runs it: the embedded database on disk under ``<data dir>/db``."""
    p = start_platform("all-in-one", tmp_path_factory.mktemp("sealed"))
    try:
        yield p
    finally:
        stop_platform(p, docker_client)


def v2_job(name: str, key_path: str, secret: str, password: str) -> str:
    """A job whose task prints the digests of the secret and of the key file it got (never the values: a
    task's log is stored too, and so is its command)."""
    return json.dumps({
        "protocolVersion": 2, "name": name, "type": "job",
        "secrets": {"token": secret},
        "prerequisites": [{"name": "img", "type": "dockerimage", "uri": "local/busybox:latest",
                           "auth": {"username": "sealed-user", "password": password,
                                    "registryuri": "127.0.0.1:9"}}],
        "taskRoles": {"main": {
            "instances": 1, "dockerImage": "img",
            "resourcePerInstance": {"cpu": 1, "memoryMB": 128, "gpu": 0},
            "commands": ['echo "secret: $(printf %s \'<% $secrets.token %>\' | sha256sum | cut -c1-64)"',
                         f"echo \"key: $(sha256sum '{key_path}' | cut -c1-64)\""]}},
    })


def files_holding(root: Path, needles: dict[str, bytes]) -> dict[str, list[str]]:
    """For each needle found, the files under ``root`` that hold it (read whole, as bytes)."""
    found: dict[str, list[str]] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        for what, needle in needles.items():
            if needle in data:
                found.setdefault(what, []).append(str(path.relative_to(root)))
    return found


async def test_no_file_of_the_data_directory_holds_a_private_key_secret_or_password(
        platform: Platform, api: PaiqClient, user: str, docker_client: docker.DockerClient) -> None:
    name, secret, password = unique("sealed"), unique("sEcReT-"), unique("pAsSwOrD-")
    key_name = f"{user}~{name}"
    await api.submit_v2(v2_job(name, f"/root/.ssh/{key_name}", secret, password).encode(), "application/json")
    private = await api.key_file(user, name, key_name)
    assert private.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    detail, seen = await wait_final(api, user, name)
    assert detail["jobStatus"]["state"] == "SUCCEEDED", (seen, detail)
    log = "".join([line async for line in api.task_log(user, name, "main", 0)])
    # the task got the secret, and the very key the owner downloads
    assert f"secret: {hashlib.sha256(secret.encode()).hexdigest()}" in log, log
    assert f"key: {hashlib.sha256(private.encode()).hexdigest()}" in log, log
    await asyncio.to_thread(stop_platform, platform, docker_client)  # the database writes what it holds

    body = "".join(private.strip().splitlines()[1:-1])  # the PEM's base64 body, as one string
    line = private.splitlines()[2]  # a line of it (70 characters), as the PEM and a document hold it
    assert len(body) > 200 and len(line) > 60
    data = Path(platform.env["PAIQ_DATA_DIR"])
    needles = {"the private key's body": body.encode(), "a line of the private key": line.encode(),
               "the secret": secret.encode(), "the registry password": password.encode()}
    # the search sees what is there: the database is on disk in the data directory, the job's name in its files
    assert await asyncio.to_thread(files_holding, data / "db", {"name": name.encode()})
    assert await asyncio.to_thread(files_holding, data, needles) == {}

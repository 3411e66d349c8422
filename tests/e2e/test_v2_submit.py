"""Protocol v2 at submit, in both platform shapes: a v2 job with a parameter and a secret submitted as
YAML runs; its secret is found in no answer, no event, no log line of paiq's and no stored document (every
collection); its config reads back as v2 (masked), a v1 job's too; ``paiq submit FILE.yaml`` takes v2.
(What the container sees of the secret: the launcher's tests.)"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from bson import json_util
from pymongo import AsyncMongoClient

from services.cli.client import PaiqClient
from tests.e2e.conftest import job_config, raw
from tests.e2e.feedwatch import connected_feed
from tests.e2e.test_cli import paiq
from tests.infra import Platform, embedded_database_uri, unique, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def v2_yaml(name: str, secret: str) -> str:
    return f"""protocolVersion: 2
name: {name}
type: job
parameters:
  greeting: hello-v2
secrets:
  token: "{secret}"
prerequisites:
  - {{name: busybox, type: dockerimage, uri: "local/busybox:latest"}}
taskRoles:
  main:
    instances: 2
    dockerImage: busybox
    resourcePerInstance: {{cpu: 1, memoryMB: 128, gpu: 0, ports: {{web: 1}}}}
    completion: {{minSucceededInstances: 2}}
    commands:
      - echo <% $parameters.greeting %> from $PAI_CURRENT_TASK_ROLE_NAME
"""


async def stored_documents(platform: Platform) -> str:
    """Every document of every collection of the platform's database, as extended JSON."""
    if platform.shape == "all-in-one":
        uri, database = embedded_database_uri(platform), "paiq"
    else:
        uri, database = platform.env["PAIQ_MONGODB_URI"], platform.env["PAIQ_MONGODB_DATABASE"]
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
    try:
        db = client[database]
        out = []
        names = await db.list_collection_names()
        assert "jobs" in names, names
        for name in names:
            async for doc in db[name].find({}):
                out.append(json_util.dumps(doc))
        return "\n".join(out)
    finally:
        await client.close()


async def test_a_v2_jobs_secret_is_in_no_answer_event_log_or_stored_document(
        platform: Platform, api: PaiqClient, admin: PaiqClient, user: str) -> None:
    secret, name = unique("sEcReT-"), unique("v2-")
    events: list[dict[str, Any]] = []
    feed = await connected_feed(platform.api, events, user=user)
    try:
        body, headers = await api.submit_v2(v2_yaml(name, secret).encode())
        assert body == {"status": 202, "message": f"Update job {name} for user {user} successfully."}
        detail, seen = await wait_final(api, user, name)
        assert detail["jobStatus"]["state"] == "SUCCEEDED", (seen, detail)
        await asyncio.sleep(1)  # the last events reach the feed
    finally:
        feed.cancel()
    token = {"Authorization": f"Bearer {api._token}"}
    answers = [json.dumps(detail), json.dumps(events)]
    assert {e["type"] for e in events} >= {"job.submitted", "job.completed"}, [e["type"] for e in events]
    for path in (f"/api/v1/user/{user}/jobs/{name}", f"/api/v1/user/{user}/jobs/{name}/config",
                 f"/api/v2/jobs/{user}~{name}/config", f"/api/v1/user/{user}/jobs", "/api/v1/jobs",
                 f"/api/v1/user/{user}/jobs/{name}/profile", f"/api/v1/user/{user}/jobs/{name}/ssh"):
        status, answer, _ = await raw(platform, "GET", path, headers=token)
        assert status in (200, 404), (path, status, answer)
        answers.append(json.dumps(answer))
    status, as_yaml, _ = await raw(platform, "GET", f"/api/v1/user/{user}/jobs/{name}/config",
                                   headers={**token, "Accept": "text/yaml"})
    answers.append(str(as_yaml))
    for text in answers:
        assert secret not in text
    assert secret not in platform.logs()
    assert secret not in await stored_documents(platform)

    # The config reads back as v2, masked, with the parameter; submitted again (renamed) it runs the same.
    status, text, headers = await raw(platform, "GET", f"/api/v2/jobs/{user}~{name}/config")
    assert status == 200 and headers["Content-Type"] == "text/yaml; charset=utf-8"
    document = yaml.safe_load(json.dumps(text))  # JSON text under text/yaml, as OpenPAI answered
    assert document["secrets"] == "******" and document["parameters"] == {"greeting": "hello-v2"}
    document = {**document, "name": f"{name}-again", "secrets": {"token": secret}}
    await api.submit_v2(json.dumps(document).encode(), "application/json")
    again, _ = await wait_final(api, user, f"{name}-again")
    assert again["jobStatus"]["state"] == "SUCCEEDED"

    # The same name again: 409, in OpenPAI v1.8's v2 words.
    status, taken, _ = await raw(platform, "POST", "/api/v2/jobs", data=v2_yaml(name, secret),
                                 headers={**token, "Content-Type": "text/yaml"})
    assert status == 409 and taken == {"code": "ConflictJobError", "message": f"Job {user}~{name} already exists."}


async def test_a_refusal_names_path_and_rule_and_a_v1_job_reads_back_as_v2(
        platform: Platform, api: PaiqClient, user: str) -> None:
    token = {"Authorization": f"Bearer {api._token}", "Content-Type": "text/yaml"}
    bad = v2_yaml("bad", "x").replace("dockerImage: busybox", "dockerImage: nothere")
    status, answer, _ = await raw(platform, "POST", "/api/v2/jobs", data=bad, headers=token)
    assert status == 400 and answer == {
        "code": "InvalidProtocolError", "message": "taskRoles.main.dockerImage: Prerequisite nothere does not exist."}
    name = unique("v1-")
    await api.submit(user, json.dumps(job_config(name, command="echo v1")).encode())
    status, text, _ = await raw(platform, "GET", f"/api/v2/jobs/{user}~{name}/config")
    document = yaml.safe_load(json.dumps(text))
    assert status == 200 and document["protocolVersion"] == 2 and document["name"] == name
    assert document["taskRoles"]["main"]["commands"] == ["echo v1"]
    status, v1, _ = await raw(platform, "GET", f"/api/v1/user/{user}/jobs/{name}/config")
    assert v1["jobName"] == name and "protocolVersion" not in v1  # the v1 route keeps answering v1


async def test_paiq_submit_takes_a_v2_yaml_file(platform: Platform, admin: PaiqClient, user: str,
                                                tmp_path: Path) -> None:
    await admin.put_user(user, "cli-secret")
    login = await paiq(platform, tmp_path, "--user", user, "login", "--password-stdin", stdin="cli-secret\n")
    assert login.returncode == 0, login.stderr
    name = unique("cli-v2-")
    job = tmp_path / "job.yaml"
    job.write_text(v2_yaml(name, "cli-secret-value"))
    run = await paiq(platform, tmp_path, "submit", str(job), "--wait")
    assert run.returncode == 0, run.stderr
    assert f"submitted {user}~{name}" in run.stdout and "SUCCEEDED" in run.stdout

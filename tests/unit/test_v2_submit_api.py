"""``POST /api/v2/jobs`` and ``GET /api/v2/jobs/{user}~{job}/config`` in the real aiohttp app, with the fake
store of :mod:`tests.unit.test_openapi_answers`: what is accepted and refused, OpenPAI v1.8's answer, the
secrets sealed in what is stored and masked in what is shown, a v1 job read back as v2."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, cast

import jsonschema
import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer

from services.submit.app import create_app
from services.submit.deps import SubmitDeps
from services.submit.openapi import document
from shared.bus.memory import MemoryBus
from shared.jobconfig.sealing import SEALED_KEY, new_key, open_registry_auth, open_secrets
from shared.scheduling.vclusters import Quota, VirtualCluster
from shared.settings.model import Settings
from tests.unit.test_openapi_answers import FakeStore, FakeUsers

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

DOC = document()
ALICE = {"Authorization": "Bearer alice-token"}
KEY = new_key()
SECRET = "pa55-w0rd-only-in-the-container"
LITERAL = "literal-registry-password"


def v2_job(name: str = "v2job", vc: str = "default", *, secrets: bool = True) -> str:
    secret_lines = f'secrets:\n  token: "{SECRET}"\n' if secrets else ""
    auth = ('    auth: {username: robot, password: "<% $secrets.token %>", registryuri: "registry.example:5000"}\n'
            if secrets else "")
    return f"""protocolVersion: 2
name: {name}
type: job
parameters:
  epochs: 7
{secret_lines}prerequisites:
  - name: img
    type: dockerimage
    uri: registry.example:5000/team/app:1
{auth}  - name: other
    type: dockerimage
    uri: busybox
    auth: {{username: u, password: {LITERAL}}}
defaults:
  virtualCluster: {vc}
taskRoles:
  worker:
    instances: 2
    dockerImage: img
    resourcePerInstance: {{cpu: 1, memoryMB: 512, gpu: 0, ports: {{http: 1}}}}
    commands:
      - echo <% $parameters.epochs %> <% $secrets.token %>
  ps:
    dockerImage: other
    resourcePerInstance: {{cpu: 1, memoryMB: 512, gpu: 0}}
    completion: {{minSucceededInstances: 1}}
    commands: [sleep 1]
"""


def make_client(env: dict[str, str]) -> tuple[SubmitDeps, FakeStore]:
    store = FakeStore()
    deps = SubmitDeps(settings=Settings.from_env(env), store=cast(Any, store), bus=MemoryBus(),
                      users=cast(Any, FakeUsers()))
    return deps, store


@pytest.fixture
async def client() -> AsyncIterator[tuple[TestClient[Any, Any], FakeStore]]:
    deps, store = make_client({"PAIQ_SECRETS_KEY": KEY})
    async with TestClient(TestServer(create_app(deps))) as test_client:
        yield test_client, store
    deps.cpu.shutdown()


def conforms(body: Any, schema: str) -> None:
    jsonschema.validate(body, {"$ref": f"#/components/schemas/{schema}", "components": DOC["components"]})


async def test_a_v2_job_is_accepted_as_openpai_answered_and_stored_sealed(
        client: tuple[TestClient[Any, Any], FakeStore]) -> None:
    http, store = client
    resp = await http.post("/api/v2/jobs", data=v2_job(), headers={**ALICE, "Content-Type": "text/yaml"})
    body = await resp.json()
    assert resp.status == 202, body
    assert body == {"status": 202, "message": "Update job v2job for user alice successfully."}
    conforms(body, "Submitted")
    assert resp.headers["Location"] == "/api/v1/user/alice/jobs/v2job"
    job = await store.find_job("alice", "v2job")
    assert job is not None
    stored = json.dumps(job.to_document())
    assert SECRET not in stored and LITERAL not in stored
    assert set(job.config.secrets) == {SEALED_KEY}
    assert open_secrets(job.config, KEY) == {"token": SECRET}
    worker = job.config.role("worker")
    assert worker.image == "registry.example:5000/team/app:1" and worker.task_number == 2
    opened = open_registry_auth(worker.registry_auth, KEY)
    assert opened is not None and (opened.username, opened.password) == ("robot", SECRET)
    assert worker.command == "echo 7 <% $secrets.token %>"
    assert job.raw_config["secrets"] == "******"


@pytest.mark.parametrize("content_type", ["text/yaml", "text/plain", "application/json", "application/x-yaml"])
async def test_yaml_and_json_bodies_are_taken(client: tuple[TestClient[Any, Any], FakeStore],
                                              content_type: str) -> None:
    http, _ = client
    name = "j" + content_type.replace("/", "-").replace(".", "")
    text = v2_job(name, secrets=False)
    data = json.dumps(yaml.safe_load(text)) if content_type == "application/json" else text
    resp = await http.post("/api/v2/jobs", data=data, headers={**ALICE, "Content-Type": content_type})
    assert resp.status == 202, await resp.text()


@pytest.mark.parametrize(("body", "content_type", "words"), [
    ("protocolVersion: 2\nname: bad.name\ntype: job\ntaskRoles: {}\n", "text/yaml", "name"),
    ("a: &a [1]\nb: !!python/object {}\n", "text/yaml", "tag"),
    (v2_job("x").replace("dockerImage: img", "dockerImage: nope"), "text/yaml",
     "taskRoles.worker.dockerImage: Prerequisite nope does not exist."),
    ("name=x", "application/x-www-form-urlencoded", "text/yaml"),
])
async def test_a_refusal_is_invalid_protocol_naming_path_and_rule(
        client: tuple[TestClient[Any, Any], FakeStore], body: str, content_type: str, words: str) -> None:
    http, _ = client
    resp = await http.post("/api/v2/jobs", data=body, headers={**ALICE, "Content-Type": content_type})
    answer = await resp.json()
    assert resp.status == 400 and answer["code"] == "InvalidProtocolError", answer
    assert words in answer["message"]
    conforms(answer, "Error")


async def test_token_and_vc_rules_are_v1s(client: tuple[TestClient[Any, Any], FakeStore]) -> None:
    http, store = client
    store.vcs = [*store.vcs, VirtualCluster(name="private", quota=Quota(cpus=10), users=("alice",))]
    assert (await http.post("/api/v2/jobs", data=v2_job())).status == 401
    assert (await http.post("/api/v2/jobs", data=v2_job(), headers=ALICE)).status == 202
    # a name taken: 409 (the fake store does not enforce it; tests/e2e/test_v2_submit.py does)
    bob = await http.post("/api/v2/jobs", data=v2_job("b", vc="private", secrets=False),
                          headers={"Authorization": "Bearer bob-token"})
    assert bob.status == 403 and (await bob.json())["code"] == "ForbiddenUserError"
    unknown = await http.post("/api/v2/jobs", data=v2_job("u", vc="nowhere", secrets=False), headers=ALICE)
    # OpenPAI v1.8's v2 answer for a VC not among the user's, unknown ones included (v1 answers 404)
    assert unknown.status == 403 and await unknown.json() == {
        "code": "ForbiddenUserError", "message": "User alice is not allowed to do operation in nowhere"}


async def test_without_a_key_secrets_are_refused_naming_the_setting() -> None:
    deps, store = make_client({})
    async with TestClient(TestServer(create_app(deps))) as http:
        resp = await http.post("/api/v2/jobs", data=v2_job(), headers=ALICE)
        answer = await resp.json()
        assert resp.status == 503 and "PAIQ_SECRETS_KEY" in answer["message"], answer
        assert await store.find_job("alice", "v2job") is None
        plain = await http.post("/api/v2/jobs", data=v2_job("plain", secrets=False).replace(
            f"auth: {{username: u, password: {LITERAL}}}", "auth: {registryuri: r.example}"), headers=ALICE)
        assert plain.status == 202, await plain.text()
    deps.cpu.shutdown()


async def test_the_v2_config_is_the_masked_document_as_openpai_sent_it(
        client: tuple[TestClient[Any, Any], FakeStore]) -> None:
    http, _ = client
    assert (await http.post("/api/v2/jobs", data=v2_job(), headers=ALICE)).status == 202
    resp = await http.get("/api/v2/jobs/alice~v2job/config")
    assert resp.status == 200 and resp.headers["Content-Type"] == "text/yaml; charset=utf-8"
    text = await resp.text()
    assert SECRET not in text and LITERAL not in text
    document = yaml.safe_load(text)
    assert document["secrets"] == "******" and document["name"] == "v2job"
    assert document["prerequisites"][0]["auth"]["password"] == "<% $secrets.token %>"
    assert document["prerequisites"][1]["auth"]["password"] == "******"
    v1_route = await http.get("/api/v1/user/alice/jobs/v2job/config")
    assert await v1_route.json() == document  # the v1 route shows a v2 job's document too


async def test_a_v1_job_reads_back_as_v2(client: tuple[TestClient[Any, Any], FakeStore]) -> None:
    http, store = client
    job = store.jobs[0]
    resp = await http.get(f"/api/v2/jobs/{job.user}~{job.name}/config")
    assert resp.status == 200
    document = yaml.safe_load(await resp.text())
    assert document["protocolVersion"] == 2 and document["name"] == job.name
    assert list(document["taskRoles"]) == [r.name for r in job.config.task_roles]
    assert (await http.get(f"/api/v2/jobs/{job.user}~nope/config")).status == 404
    assert (await http.get("/api/v2/jobs/bad user~x/config")).status == 400

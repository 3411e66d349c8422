"""A job travels submit -> scheduler -> launcher -> Docker -> status, in both shapes of the platform."""

from __future__ import annotations

import json

import docker
import pytest

from services.cli.client import ApiCallError, PaiqClient
from tests.e2e.conftest import job_config
from tests.infra import EnvSink, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


async def test_hello_world_runs_in_a_container_that_sees_its_environment(api: PaiqClient, user: str) -> None:
    async with EnvSink() as sink:
        config = job_config("hello", command=f"env | nc $PAI_CONTAINER_HOST_IP {sink.port} && sleep 2", roles=[{
            "name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128,
            "portList": [{"label": "http", "beginAt": 0, "portNumber": 2}],
            "command": f"env | nc $PAI_CONTAINER_HOST_IP {sink.port} && sleep 2"}])
        _, headers = await api.submit(user, json.dumps(config).encode())
        assert headers["Location"] == f"/api/v1/user/{user}/jobs/hello"
        detail, states = await wait_final(api, user, "hello")
        [env] = await sink.wait_for(1)

    assert states[-1] == "SUCCEEDED", detail
    assert "RUNNING" in states and states.index("RUNNING") < states.index("SUCCEEDED")
    assert detail["jobStatus"]["appExitCode"] == 0
    [task] = detail["taskRoles"]["main"]["taskStatuses"]
    assert task["taskState"] == "SUCCEEDED" and task["containerExitCode"] == 0
    assert env["PAI_JOB_NAME"] == "hello"
    assert env["PAI_USER_NAME"] == user
    assert env["PAI_CURRENT_TASK_ROLE_NAME"] == "main"
    assert env["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"] == "0"
    ports = task["containerPorts"]["http"]
    assert len(ports.split(",")) == 2
    ssh = task["containerPorts"]["ssh"]  # not declared: every role gets one, as in OpenPAI
    assert env["PAI_CONTAINER_HOST_PORT_LIST"] == f"http:{ports};ssh:{ssh}"
    assert env["PAI_CONTAINER_HOST_http_PORT_LIST"] == ports
    assert env["PAI_CONTAINER_SSH_PORT"] == ssh


async def test_two_roles_run_four_containers(api: PaiqClient, user: str) -> None:
    roles = [{"name": name, "taskNumber": 2, "cpuNumber": 1, "memoryMB": 128,
              "portList": [{"label": "port", "beginAt": 0, "portNumber": 1}],
              "command": "env | nc $PAI_CONTAINER_HOST_IP SINK"} for name in ("ps", "worker")]
    async with EnvSink() as sink:
        for role in roles:
            role["command"] = str(role["command"]).replace("SINK", str(sink.port))
        await api.submit(user, json.dumps(job_config("ps-worker", command="", roles=roles)).encode())
        detail, _ = await wait_final(api, user, "ps-worker")
        envs = await sink.wait_for(4)

    assert detail["jobStatus"]["state"] == "SUCCEEDED", detail
    tasks = [t for role in ("ps", "worker") for t in detail["taskRoles"][role]["taskStatuses"]]
    assert len(tasks) == 4
    assert len({t["containerId"] for t in tasks}) == 4
    assert sorted((e["PAI_CURRENT_TASK_ROLE_NAME"], e["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"]) for e in envs) == [
        ("ps", "0"), ("ps", "1"), ("worker", "0"), ("worker", "1")]
    ports = {t["containerPorts"]["port"] for t in tasks}
    assert len(ports) == 4, "tasks on one node must never share a port"
    assert envs[0]["PAI_TASK_ROLE_ps_HOST_LIST"].count(",") == 1


async def test_a_failing_command_fails_the_job_with_its_exit_code(api: PaiqClient, user: str) -> None:
    await api.submit(user, json.dumps(job_config("fails", command="echo about to fail >&2; exit 3")).encode())
    detail, _ = await wait_final(api, user, "fails")
    status = detail["jobStatus"]
    assert status["state"] == "FAILED"
    assert status["appExitCode"] == 3
    assert status["appExitTriggerTaskRoleName"] == "main"
    assert status["appExitTriggerTaskIndex"] == 0
    assert "about to fail" in status["appExitDiagnostics"]


async def test_an_absent_image_is_pulled_from_the_registry(
        api: PaiqClient, user: str, registry_image: str, docker_client: docker.DockerClient) -> None:
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.images.get(registry_image)
    await api.submit(user, json.dumps(job_config("pulled", image=registry_image, command="true")).encode())
    detail, _ = await wait_final(api, user, "pulled")
    assert detail["jobStatus"]["state"] == "SUCCEEDED", detail
    assert docker_client.images.get(registry_image) is not None


async def test_a_missing_image_fails_with_254_and_says_so(api: PaiqClient, user: str, registry_image: str) -> None:
    missing = registry_image.rsplit(":", 1)[0] + ":no-such-tag"
    await api.submit(user, json.dumps(job_config("no-image", image=missing, command="true")).encode())
    detail, _ = await wait_final(api, user, "no-image")
    assert detail["jobStatus"]["state"] == "FAILED"
    assert detail["jobStatus"]["appExitCode"] == 254
    assert "does not exist" in detail["jobStatus"]["appExitTriggerMessage"]


@pytest.mark.parametrize(("body", "path", "rule"), [
    ({"jobName": "bad name", "image": "i", "taskRoles": [{"name": "r", "command": "c"}]}, "jobName", "must match"),
    ({"jobName": "ok", "taskRoles": [{"name": "r", "command": "c"}]}, "image", "is required"),
    ({"jobName": "ok", "image": "i", "taskRoles": [{"name": "r", "taskNumber": 0, "command": "c"}]},
     "taskRoles[0].taskNumber", "must be >= 1"),
    ({"jobName": "ok", "image": "i", "taskRoles": [{"name": "r", "memoryMB": 200, "shmMB": 300, "command": "c"}]},
     "taskRoles[0].shmMB", "must be <= memoryMB (200)"),
    ({"jobName": "ok", "image": "i", "taskRoles": [{"name": "r", "command": "c"}, {"name": "r", "command": "c"}]},
     "taskRoles[1].name", "must be unique"),
    (b"this is not json", "(body)", "is not valid JSON"),
    ([1, 2], "(body)", "must be a JSON object"),
])
async def test_invalid_configs_are_refused_naming_field_and_rule(
        api: PaiqClient, user: str, body: object, path: str, rule: str) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(ApiCallError) as refused:
        await api.submit(user, raw)
    assert refused.value.status == 400
    assert refused.value.code == "InvalidParametersError"
    assert f"{path}: {rule}" in refused.value.message
    assert await api.jobs(user) == [], "nothing is stored for a refused job"


async def test_a_second_job_with_the_same_name_conflicts(api: PaiqClient, user: str) -> None:
    config = json.dumps(job_config("twice", command="true")).encode()
    await api.submit(user, config)
    with pytest.raises(ApiCallError) as refused:
        await api.submit(user, config)
    assert refused.value.status == 409
    assert refused.value.code == "ConflictJobError"
    assert len(await api.jobs(user)) == 1
    await wait_final(api, user, "twice")

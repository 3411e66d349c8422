"""The seeds' distributed TensorFlow shape: workers find the parameter servers through PAI_* variables alone."""

from __future__ import annotations

import asyncio
import json

import docker
import pytest

from services.cli.client import PaiqClient
from tests.e2e.conftest import job_config
from tests.infra import EnvSink, Platform, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

PS = ("mkdir -p /tmp/www && echo ps-$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX > /tmp/www/index.html && "
      "exec httpd -f -p $PAI_CONTAINER_HOST_http_PORT_LIST -h /tmp/www")
WORKER = ("got=''; for host in $(echo $PAI_TASK_ROLE_ps_server_HOST_LIST | tr , ' '); do "
          "  for i in $(seq 150); do r=$(wget -qO- http://$host/ 2>/dev/null) && break; sleep 0.2; done; "
          "  got=\"$got $r\"; "
          "done; "
          "(echo WORKER=$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX; echo GOT=$got; env) "
          "| nc $PAI_CONTAINER_HOST_IP SINK; "
          "test \"$got\" = ' ps-0 ps-1'")


def tensorflow_like(sink_port: int) -> dict[str, object]:
    ports = [{"label": "http", "beginAt": 0, "portNumber": 1}, {"label": "ssh", "beginAt": 0, "portNumber": 1}]
    return job_config("tf-distributed", command="", roles=[
        {"name": "ps_server", "taskNumber": 2, "cpuNumber": 1, "memoryMB": 128, "gpuNumber": 0,
         "portList": ports, "command": PS},
        {"name": "worker", "taskNumber": 2, "cpuNumber": 1, "memoryMB": 128, "gpuNumber": 0,
         "portList": ports, "command": WORKER.replace("SINK", str(sink_port)), "minSucceededTaskCount": 2},
    ], jobEnvs={"batch_size": 32, "job_model": "resnet20"})


async def test_workers_reach_every_ps_and_the_job_succeeds_while_ps_still_run(
        api: PaiqClient, user: str, platform: Platform, docker_client: docker.DockerClient) -> None:
    async with EnvSink() as sink:
        await api.submit(user, json.dumps(tensorflow_like(sink.port)).encode())
        detail, _ = await wait_final(api, user, "tf-distributed")
        reports = await sink.wait_for(2)

    status = detail["jobStatus"]
    assert status["state"] == "SUCCEEDED", status
    assert status["appExitTriggerTaskRoleName"] == "worker"
    assert "minSucceededTaskCount 2" in status["appExitTriggerMessage"]
    assert sorted(r["WORKER"] for r in reports) == ["0", "1"]
    assert all(r["GOT"].split() == ["ps-0", "ps-1"] for r in reports), reports
    ps = detail["taskRoles"]["ps_server"]["taskStatuses"]
    hosts = ",".join(f"{t['containerIp']}:{t['containerPorts']['http']}" for t in ps)
    assert all(r["PAI_TASK_ROLE_ps_server_HOST_LIST"] == hosts for r in reports)
    assert all(r["batch_size"] == "32" and r["job_model"] == "resnet20" for r in reports)
    assert reports[0]["PAI_RESOURCE_worker"] == "0,1,128,64"
    # Every variable of OpenPAI v0.14's container script, as the task itself sees it
    workers = {t["taskIndex"]: t for t in detail["taskRoles"]["worker"]["taskStatuses"]}
    for r in reports:
        me = workers[int(r["WORKER"])]
        http, ssh = me["containerPorts"]["http"], me["containerPorts"]["ssh"]
        assert {k: r.get(k) for k in (
            "PAI_TASK_ROLE_INDEX", "PAI_TASK_INDEX", "PAI_USERNAME", "PAI_USER_NAME", "HADOOP_USER_NAME",
            "PAI_CURRENT_CONTAINER_IP", "PAI_CONTAINER_HOST_IP", "PAI_CURRENT_CONTAINER_PORT",
            "PAI_CONTAINER_HOST_PORT", "PAI_CONTAINER_SSH_PORT", "PAI_CONTAINER_HOST_PORT_LIST", "PAI_RESOURCE",
            "PAI_TASK_ROLE_NAME", "PAI_TASK_ROLE_NUM", "PAI_TASK_CPU_NUM", "PAI_TASK_MEM_MB", "PAI_TASK_GPU_NUM",
            "PAI_TASKS_NUM", "PAI_TASK_ROLES_NUM", "FRAMEWORK_NAME", "NVIDIA_VISIBLE_DEVICES")} == {
            "PAI_TASK_ROLE_INDEX": r["WORKER"], "PAI_TASK_INDEX": r["WORKER"], "PAI_USERNAME": user,
            "PAI_USER_NAME": user, "HADOOP_USER_NAME": user, "PAI_CURRENT_CONTAINER_IP": me["containerIp"],
            "PAI_CONTAINER_HOST_IP": me["containerIp"], "PAI_CURRENT_CONTAINER_PORT": http,
            "PAI_CONTAINER_HOST_PORT": http, "PAI_CONTAINER_SSH_PORT": ssh,
            "PAI_CONTAINER_HOST_PORT_LIST": f"http:{http};ssh:{ssh}", "PAI_RESOURCE": "0,1,128,64",
            "PAI_TASK_ROLE_NAME": "worker", "PAI_TASK_ROLE_NUM": "2", "PAI_TASK_CPU_NUM": "1",
            "PAI_TASK_MEM_MB": "128", "PAI_TASK_GPU_NUM": "0", "PAI_TASKS_NUM": "4", "PAI_TASK_ROLES_NUM": "2",
            "FRAMEWORK_NAME": f"{user}~tf-distributed", "NVIDIA_VISIBLE_DEVICES": "void"}
        assert r["APP_ID"].startswith(f"{user}~tf-distributed~") and r["APP_ID"].endswith("-0")
        assert "CUDA_VISIBLE_DEVICES" not in r

    # The parameter servers never exit on their own: completing the job stops them.
    for _ in range(150):
        ps = (await api.job(user, "tf-distributed"))["taskRoles"]["ps_server"]["taskStatuses"]
        if all(t["taskState"] == "STOPPED" for t in ps):
            break
        await asyncio.sleep(0.2)
    assert [t["taskState"] for t in ps] == ["STOPPED", "STOPPED"]
    for _ in range(100):  # their logs are saved, then the containers are removed
        left = docker_client.containers.list(all=True, filters={"label": f"paiq.user={user}"})
        if not left:
            break
        await asyncio.sleep(0.1)
    assert left == []

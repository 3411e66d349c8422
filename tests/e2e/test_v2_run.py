"""Protocol v2 jobs run, in both platform shapes: each role's own image (one from a private registry whose
password is a secret), parameters and secrets rendered, per-role completion, and OpenPAI v1.x's task
variables, checked inside the containers (a task exits non-zero when one is wrong) and reported to the
test; OpenPAI's TensorFlow ps/worker and Horovod examples (images swapped for local ones, commands for the
env logic they had); a v1 job read back as v2 and submitted again runs the same."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from services.cli.client import PaiqClient
from tests.e2e.conftest import job_config
from tests.infra import EnvSink, Platform, Registry, push_image, run_registry, unique, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

CORPUS = Path(__file__).parents[1] / "unit" / "protocol_v2_corpus"
REGISTRY_USER = "v2-puller"
REGISTRY_PASSWORD = f"pw-{unique('')}-&-never-shown"


@pytest.fixture(scope="module")
def v2_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with run_registry(tmp_path_factory.mktemp("v2-registry"), login=(REGISTRY_USER, REGISTRY_PASSWORD)) as registry:
        yield registry


def report(sink: EnvSink, *extra: str) -> str:
    """A task's line sending its environment (and ``extra`` NAME=value lines) to the test."""
    lines = "; ".join(f"echo {e}" for e in extra)
    return f"({lines}{'; ' if lines else ''}env) | nc $PAI_CONTAINER_HOST_IP {sink.port}"


def md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


# Checks a task runs on itself; each failing one exits with its own code so the task's exit says which.
WORKER_CHECKS = [
    'test "$PAI_JOB_NAME" = "$PAI_USER_NAME~@JOB@"', 'test "$PAI_FRAMEWORK_NAME" = "$PAI_JOB_NAME"',
    'test "$PAI_VIRTUAL_CLUSTER" = default', 'test "$PAI_CURRENT_TASK_ROLE_NAME" = Worker_A',
    'test "$PAI_TASK_ROLE_LIST" = ps,Worker_A', 'test "$PAI_TASK_ROLE_INSTANCES" = ps:0,workera:0,workera:1',
    'test "$PAI_TASK_ROLE_TASK_COUNT_Worker_A" = 2', 'test "$PAI_MIN_SUCCEEDED_TASK_COUNT_Worker_A" = 2',
    'test "$PAI_MIN_FAILED_TASK_COUNT_ps" = 1', 'test "$PAI_RESOURCE_Worker_A" = 0,1,128,64',
    'test "$FC_TASKROLE_NAME" = workera', 'test "$FC_TASK_INDEX" = "$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"',
    'eval "test \\"\\$PAI_HOST_IP_workera_$FC_TASK_INDEX\\" = \\"$PAI_CONTAINER_HOST_IP\\""',
    'eval "test \\"\\$PAI_PORT_LIST_workera_${FC_TASK_INDEX}_tb\\" = \\"$PAI_CONTAINER_HOST_tb_PORT_LIST\\""',
    'eval "test \\"\\$PAI_PORT_LIST_Worker_A_${FC_TASK_INDEX}_tb\\" = \\"$PAI_CONTAINER_HOST_tb_PORT_LIST\\""',
    'test -n "$PAI_HOST_IP_ps_0"', 'test "${PAI_CONTAINER_HOST_PORT_LIST%;}" != "$PAI_CONTAINER_HOST_PORT_LIST"',
    'test "$(echo "$PAI_CONTAINER_HOST_tb_PORT_LIST" | tr , "\\n" | wc -l)" = 2',
    'test "$STEPS" = 7',
    "test \"$(printf %s '<% $secrets.token %>' | md5sum | cut -d' ' -f1)\" = @TOKEN_MD5@",
]


def checked(checks: list[str]) -> str:
    return "; ".join(f"{c} || exit {10 + i}" for i, c in enumerate(checks))


def two_role_job(name: str, sink: EnvSink, image: str, token: str) -> str:
    worker = ("STEPS=<% $parameters.steps %>; " + report(sink, "ROLE=worker")
              + "; " + checked(WORKER_CHECKS).replace("@JOB@", name).replace("@TOKEN_MD5@", md5(token)))
    document = {
        "protocolVersion": 2, "name": name, "type": "job",
        "parameters": {"steps": 7}, "secrets": {"token": token, "registry": REGISTRY_PASSWORD},
        "prerequisites": [
            {"name": "plain", "type": "dockerimage", "uri": "local/busybox:latest"},
            {"name": "private", "type": "dockerimage", "uri": image, "auth": {
                "username": REGISTRY_USER, "password": "<% $secrets.registry %>", "registryuri": image.split("/")[0]}},
        ],
        "taskRoles": {
            # never ends on its own: the job ends when both workers have succeeded (per-role completion)
            "ps": {"dockerImage": "plain", "resourcePerInstance": {"cpu": 1, "memoryMB": 128, "gpu": 0},
                   "commands": [report(sink, "ROLE=ps"), 'test "$PAI_CURRENT_TASK_ROLE_NAME" = ps', "sleep 600"]},
            "Worker_A": {"instances": 2, "dockerImage": "private",
                         "completion": {"minSucceededInstances": 2, "minFailedInstances": 1},
                         "extraContainerOptions": {"shmMB": 64},
                         "resourcePerInstance": {"cpu": 1, "memoryMB": 128, "gpu": 0, "ports": {"tb": 2}},
                         "commands": [worker]},
        },
    }
    return yaml.safe_dump(document, sort_keys=False)


async def test_a_two_role_v2_job_runs_with_its_images_secret_parameters_ports_and_v1x_variables(
        platform: Platform, api: PaiqClient, user: str, v2_registry: Registry,
        docker_client: docker.DockerClient) -> None:
    image = v2_registry.image(f"private/{unique('v2')}:1")
    push_image(docker_client, "local/busybox:latest", image,
               auth={"username": REGISTRY_USER, "password": REGISTRY_PASSWORD})
    name, token = unique("v2run-"), f'tok-{unique("")}-"q"&<x>$HOME'  # as written: no HTML escaping, no expansion
    async with EnvSink() as sink:
        await api.submit_v2(two_role_job(name, sink, image, token).encode())
        detail, seen = await wait_final(api, user, name)
        reports = await sink.wait_for(3)

    status = detail["jobStatus"]
    assert status["state"] == "SUCCEEDED", (seen, status["appExitTriggerMessage"], status["appExitDiagnostics"])
    assert status["appExitTriggerTaskRoleName"] == "Worker_A"
    workers = {t["taskIndex"]: t for t in detail["taskRoles"]["Worker_A"]["taskStatuses"]}
    assert [t["containerExitCode"] for t in workers.values()] == [0, 0], workers
    [ps] = detail["taskRoles"]["ps"]["taskStatuses"]
    by_role: dict[str, list[dict[str, str]]] = {}
    for r in reports:
        by_role.setdefault(r["ROLE"], []).append(r)
    for r in by_role["worker"]:
        me = workers[int(r["FC_TASK_INDEX"])]
        ports = me["containerPorts"]
        assert r["PAI_TASK_ROLE_workera_HOST_LIST"] == r["PAI_TASK_ROLE_Worker_A_HOST_LIST"] == ",".join(
            f"{workers[i]['containerIp']}:{workers[i]['containerPorts']['http']}" for i in (0, 1))
        assert r["PAI_HOST_IP_ps_0"] == ps["containerIp"]
        assert r["PAI_CONTAINER_HOST_PORT_LIST"].endswith(";") and f"http:{ports['http']};" in \
            r["PAI_CONTAINER_HOST_PORT_LIST"]
        assert r["FC_POD_NAME"] == f"{r['FC_FRAMEWORK_NAME']}-workera-{r['FC_TASK_INDEX']}"
        assert r["FC_FRAMEWORK_NAME"] == md5(f"{user}~{name}") and r["FC_FRAMEWORK_ATTEMPT_ID"] == "0"
        assert r["PAI_JOB_VC_NAME"] == "default" and r["PAI_TASK_ROLE_NAME"] == "Worker_A"  # v0.14's kept
    assert all(token not in json.dumps(r) for r in reports)  # the secret is in the command, not the env


def corpus_job(document: str, name: str, roles: dict[str, list[str]]) -> dict[str, Any]:
    """One of OpenPAI's v2 examples with local images, small resources and ``roles``' commands."""
    job: dict[str, Any] = yaml.safe_load((CORPUS / document).read_text())
    job["name"] = name
    for item in job["prerequisites"]:
        if item["type"] == "dockerimage":
            item["uri"] = "local/busybox:latest"
    for role_name, role in job["taskRoles"].items():
        role["resourcePerInstance"] = {"cpu": 1, "memoryMB": 128, "gpu": 0}
        role["commands"] = roles[role_name]
    return job


async def test_openpais_tensorflow_ps_worker_example_runs_its_env_logic(
        platform: Platform, api: PaiqClient, user: str) -> None:
    name = unique("tf-v2-")
    async with EnvSink() as sink:
        # tf_cnn_benchmarks' flags, built as the example built them, then checked
        flags = ("FLAGS=\"--ps_hosts=$PAI_TASK_ROLE_psserver_HOST_LIST --worker_hosts=$PAI_TASK_ROLE_worker_HOST_LIST "
                 "--task_index=$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX --data_name=<% $data.name %> "
                 "--model=<% $parameters.model %> --batch_size=<% $parameters.batchsize %>\"")
        checks = ['test -n "$PAI_TASK_ROLE_psserver_HOST_LIST"', 'test -n "$PAI_TASK_ROLE_worker_HOST_LIST"',
                  'test "$(pwd)" = /pai']
        job = corpus_job("marketplace-v2__tensorflow-cifar10.yaml", name, {
            # both report before either ends the job (each role's one success completes it)
            role: [flags, report(sink, f"ROLE={role}", '"FLAGS=$FLAGS"'), checked(checks), "sleep 3"]
            for role in ("worker", "psserver")})
        for entry in job["deployments"][0]["taskRoles"].values():  # the image's set-up: fetched nothing here
            entry["preCommands"] = ["echo set-up <% $data.name %> <% $script.name %>"]
        await api.submit_v2(yaml.safe_dump(job, sort_keys=False).encode())
        detail, seen = await wait_final(api, user, name)
        reports = await sink.wait_for(2)

    assert detail["jobStatus"]["state"] == "SUCCEEDED", (seen, detail)
    [ps] = detail["taskRoles"]["psserver"]["taskStatuses"]
    [worker] = detail["taskRoles"]["worker"]["taskStatuses"]
    hosts = {role: f"{t['containerIp']}:{t['containerPorts']['http']}" for role, t in
             (("psserver", ps), ("worker", worker))}
    for r in reports:
        assert r["FLAGS"] == (f"--ps_hosts={hosts['psserver']} --worker_hosts={hosts['worker']} --task_index=0 "
                              "--data_name=cifar10 --model=resnet20 --batch_size=32"), r
        assert r["PAI_TASK_ROLE_INSTANCES"] == "worker:0,psserver:0"


async def test_openpais_horovod_example_finds_its_hosts_as_mpirun_was_told(
        platform: Platform, api: PaiqClient, user: str) -> None:
    name = unique("hvd-v2-")
    async with EnvSink() as sink:
        # mpirun -H master-0:4,worker-0:4: the ssh plugin's hosts <c>-<i>, from PAI_TASK_ROLE_INSTANCES
        hosts = ("HOSTS=$(echo $PAI_TASK_ROLE_INSTANCES | tr , '\\n' | sed 's/:/-/; s/$/:4/' | tr '\\n' , "
                 "| sed 's/,$//')")
        checks = ['test "$HOSTS" = master-0:4,worker-0:4', 'test -n "$PAI_HOST_IP_worker_0"',
                  'test -n "$PAI_PORT_LIST_worker_0_ssh"',
                  'test "$NCCL" = "-x NCCL_DEBUG=INFO -x NCCL_SOCKET_IFNAME=eth0"']
        job = corpus_job("marketplace-v2__horovod-pytorch-synthetic-benchmark.yaml", name, {
            "master": ["sleep 1", hosts, 'NCCL="<% $parameters.nccl %>"', report(sink, '"HOSTS=$HOSTS"'),
                       checked(checks)],
            "worker": ["sleep 600"],
        })
        # Its ssh plugin's barrier waits for every peer's sshd, which local/busybox has none of (the barrier
        # itself is tests/e2e/test_runtime_plugins.py's, on paiq/sshd:test): this test is about the hosts.
        for plugin in job["extras"]["com.microsoft.pai.runtimeplugin"]:
            if plugin["plugin"] == "ssh":
                plugin["parameters"]["sshbarrier"] = False
        await api.submit_v2(yaml.safe_dump(job, sort_keys=False).encode())
        detail, seen = await wait_final(api, user, name)
        [r] = await sink.wait_for(1)

    assert detail["jobStatus"]["state"] == "SUCCEEDED", (seen, detail)
    assert detail["jobStatus"]["appExitTriggerTaskRoleName"] == "master"
    [worker] = detail["taskRoles"]["worker"]["taskStatuses"]
    assert r["HOSTS"] == "master-0:4,worker-0:4" and r["PAI_HOST_IP_worker_0"] == worker["containerIp"]
    assert r["PAI_PORT_LIST_worker_0_ssh"] == str(worker["containerPorts"]["ssh"])


V014 = ["PAI_TASK_ROLE_LIST", "PAI_TASK_ROLE_TASK_COUNT_worker", "PAI_CURRENT_TASK_ROLE_NAME", "PAI_USER_NAME",
        "PAI_RESOURCE_worker", "PAI_MIN_SUCCEEDED_TASK_COUNT_worker", "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"]


async def test_a_v1_job_read_back_as_v2_and_submitted_again_runs_the_same(
        platform: Platform, api: PaiqClient, user: str) -> None:
    name = unique("v1v2-")
    async with EnvSink() as sink:
        command = report(sink) + '; test "$PAI_TASK_ROLE_LIST" = ps,worker; sleep 2'
        config = job_config(name, command="", roles=[
            {"name": "ps", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128, "command": command},
            {"name": "worker", "taskNumber": 2, "cpuNumber": 1, "memoryMB": 128, "shmMB": 64, "command": command,
             "minSucceededTaskCount": 2, "portList": [{"label": "tb", "beginAt": 0, "portNumber": 1}]}])
        config["jobEnvs"] = {"RUN": "first"}
        await api.submit(user, json.dumps(config).encode())
        first, seen = await wait_final(api, user, name)
        assert first["jobStatus"]["state"] == "SUCCEEDED", (seen, first)
        document = yaml.safe_load(await api.v2_config(user, name))
        assert document["protocolVersion"] == 2
        document["name"] = f"{name}-v2"
        await api.submit_v2(yaml.safe_dump(document, sort_keys=False).encode())
        again, seen = await wait_final(api, user, f"{name}-v2")
        reports = await sink.wait_for(6)

    assert again["jobStatus"]["state"] == "SUCCEEDED", (seen, again)
    runs: dict[str, list[dict[str, str]]] = {}
    for r in reports:
        runs.setdefault("v2" if "PAI_FRAMEWORK_NAME" in r else "v1", []).append(r)

    def seen_by(run: str) -> list[dict[str, str | None]]:
        return sorted(({k: r.get(k) for k in V014} for r in runs[run]), key=json.dumps)

    assert len(runs["v1"]) == len(runs["v2"]) == 3
    assert seen_by("v1") == seen_by("v2")
    assert {r["PAI_TASK_ROLE_INSTANCES"] for r in runs["v2"]} == {"ps:0,worker:0,worker:1"}
    assert {r["PAI_JOB_NAME"] for r in runs["v1"]} == {name}
    assert {r["PAI_JOB_NAME"] for r in runs["v2"]} == {f"{user}~{name}-v2"}
    assert {r["RUN"] for r in reports} == {"first"}  # jobEnvs: export lines before the v2 commands

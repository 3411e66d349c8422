"""OpenPAI v1.x's task variables for protocol v2 jobs (shared.tasks.runtimeenv), beside v0.14's."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.admission.envsize import CONTAINER_NAME_MAX, WORST_ATTEMPT, estimate, worst_app_id
from shared.admission.v2.checks import validate_v2_body
from shared.admission.validation import Accepted
from shared.jobconfig.model import JobConfig
from shared.scheduling.placement import Plan
from shared.tasks.envvars import build_task_env, job_environment, resolve_paths, task_environment
from shared.tasks.launchspec import job_launch
from shared.tasks.runtimeenv import colliding_roles, framework_role_name, speaks_v1x
from tests.unit import seed_configs
from tests.unit.envvars_reference import script_task_env
from tests.unit.factories import load_seed_config, make_config, make_job, make_node, make_plan, placement, role_dict
from tests.unit.runtimeenv_reference import runtime_task_env
from tests.unit.test_envsize import exec_bytes, problems, with_tasks, worst_plan

pytestmark = pytest.mark.unit

CORPUS = Path(__file__).parent / "protocol_v2_corpus"
FS = "file:///var/paiq/fs"
N1 = make_node("n1", ip="10.0.0.5", gpus=["V100"] * 8)
N2 = make_node("n2", ip="10.0.0.6", gpus=["V100"] * 8)

J1 = """
protocolVersion: 2
name: j1
type: job
defaults: {virtualCluster: default}
parameters: {steps: 10}
secrets: {token: s3cr3t}
prerequisites:
  - {name: img, type: dockerimage, uri: "local/busybox:latest"}
  - {name: img2, type: dockerimage, uri: "registry.example:5000/team/worker:1", auth: {username: u,
     password: "<% $secrets.token %>", registryuri: "registry.example:5000"}}
taskRoles:
  ps:
    dockerImage: img
    resourcePerInstance: {cpu: 1, memoryMB: 1024, gpu: 0}
    commands: ["serve --steps <% $parameters.steps %>"]
  Worker_A:
    instances: 2
    dockerImage: img2
    completion: {minFailedInstances: -1, minSucceededInstances: 2}
    resourcePerInstance: {cpu: 4, memoryMB: 8192, gpu: 1, ports: {tb: 2}}
    extraContainerOptions: {shmMB: 64}
    commands: ["train --token '<% $secrets.token %>' --steps <% $parameters.steps %>"]
"""


def v2_config(text: str | bytes) -> JobConfig:
    result = validate_v2_body(text)
    assert isinstance(result, Accepted), result
    return result.config


def j1() -> JobConfig:
    return v2_config(J1)


J1_PLAN = make_plan(
    placement("ps", 0, N1, ports={"http": (20001,), "ssh": (20002,)}),
    placement("Worker_A", 0, N1, gpus=(0,), ports={"tb": (20010, 20011), "http": (20003,), "ssh": (20004,)}),
    placement("Worker_A", 1, N2, gpus=(3,), ports={"tb": (20107, 20108), "http": (20105,), "ssh": (20106,)}),
)


def env_of(config: JobConfig, plan: Plan, role: str, index: int, *, attempt: int = 0) -> dict[str, str]:
    return build_task_env(config, plan, user="alice", role=config.role(role), index=index,
                          paths=resolve_paths(config, "alice", FS), container_id="cid", app="app-0", attempt=attempt)


MD5 = "c9498937ffacc0b492bcd25d8efe2f23"  # md5("alice~j1")


@pytest.mark.parametrize(("name", "value"), [
    ("PAI_FRAMEWORK_NAME", "alice~j1"),
    ("PAI_JOB_NAME", "alice~j1"),
    ("PAI_VIRTUAL_CLUSTER", "default"),
    ("PAI_JOB_VC_NAME", "default"),  # v0.14's, kept
    ("PAI_USER_NAME", "alice"),
    ("PAI_TASK_ROLE_LIST", "ps,Worker_A"),
    ("PAI_TASK_ROLE_COUNT", "2"),
    ("PAI_TASKS_NUM", "3"),
    ("PAI_TASK_ROLE_INSTANCES", "ps:0,workera:0,workera:1"),
    # rest-server's, by the role's name as written
    ("PAI_TASK_ROLE_TASK_COUNT_Worker_A", "2"),
    ("PAI_RESOURCE_Worker_A", "1,4,8192,64"),
    ("PAI_RESOURCE_ps", "0,1,1024,512"),  # v2's shm when unset
    ("PAI_MIN_FAILED_TASK_COUNT_Worker_A", "-1"),
    ("PAI_MIN_SUCCEEDED_TASK_COUNT_Worker_A", "2"),
    ("PAI_MIN_FAILED_TASK_COUNT_ps", "1"),
    ("PAI_MIN_SUCCEEDED_TASK_COUNT_ps", "1"),
    # the runtime's, by the framework's name <c> and by the name as written
    ("PAI_HOST_IP_workera_1", "10.0.0.6"),
    ("PAI_HOST_IP_Worker_A_1", "10.0.0.6"),
    ("PAI_PORT_LIST_workera_1_tb", "20107,20108"),
    ("PAI_PORT_LIST_Worker_A_1_tb", "20107,20108"),
    ("PAI_workera_0_http_PORT", "20003"),
    ("PAI_Worker_A_0_http_PORT", "20003"),
    ("PAI_TASK_ROLE_workera_HOST_LIST", "10.0.0.5:20003,10.0.0.6:20105"),
    ("PAI_TASK_ROLE_Worker_A_HOST_LIST", "10.0.0.5:20003,10.0.0.6:20105"),
    ("PAI_HOST_IP_ps_0", "10.0.0.5"),
    ("PAI_TASK_ROLE_ps_HOST_LIST", "10.0.0.5:20001"),
    # this task: Worker_A 1 on n2
    ("PAI_CURRENT_TASK_ROLE_NAME", "Worker_A"),
    ("PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX", "1"),
    ("PAI_TASK_INDEX", "1"),
    ("PAI_CONTAINER_HOST_PORT_LIST", "tb:20107,20108;http:20105;ssh:20106;"),
    ("PAI_CONTAINER_HOST_tb_PORT_LIST", "20107,20108"),
    ("PAI_CONTAINER_HOST_IP", "10.0.0.6"),
    ("PAI_CONTAINER_SSH_PORT", "20106"),
    ("FC_FRAMEWORK_NAME", MD5),
    ("FC_TASKROLE_NAME", "workera"),
    ("FC_TASK_INDEX", "1"),
    ("FC_POD_NAME", f"{MD5}-workera-1"),
    ("FC_FRAMEWORK_ATTEMPT_ID", "3"),
    ("FC_TASK_ATTEMPT_ID", "0"),
])
def test_a_v2_task_sees_what_openpai_v1x_gave_it(name: str, value: str) -> None:
    assert env_of(j1(), J1_PLAN, "Worker_A", 1, attempt=3)[name] == value


def test_names_kubernetes_alone_gave_are_left_out() -> None:
    env = env_of(j1(), J1_PLAN, "ps", 0)
    assert not {"FC_FRAMEWORK_NAMESPACE", "FC_CONFIGMAP_NAME", "FC_POD_UID", "FC_FRAMEWORK_UID",
                "RUNTIME_LOG_PIPE"} & set(env)
    assert not [k for k in env if k.startswith("PAI_HOST_IP_ps_") and k != "PAI_HOST_IP_ps_0"]


@pytest.mark.parametrize(("name", "framework"), [
    ("worker", "worker"), ("Worker_A", "workera"), ("ps_server", "psserver"), ("_x9", "x9"), ("ABC", "abc")])
def test_the_framework_spells_a_role_as_convert_name_did(name: str, framework: str) -> None:
    assert framework_role_name(name) == framework


def test_roles_of_one_framework_name_are_paired() -> None:
    assert colliding_roles(["a_b", "ps", "ab", "Ps", "c"]) == [("a_b", "ab"), ("ps", "Ps")]
    assert colliding_roles(["worker", "ps"]) == []


def test_a_v2_job_whose_roles_collide_in_their_framework_name_is_refused() -> None:
    text = J1.replace("  ps:\n", "  workera:\n")
    result = validate_v2_body(text)
    assert not isinstance(result, Accepted)
    [problem] = result.problems
    assert problem.path == "taskRoles.Worker_A"
    assert "role workera's name once lowercased and stripped of '_' ('workera')" in problem.rule


# --- against the reference: v0.14's container script, then v1.x's three programs over it ------------


def assert_as_openpai(config: JobConfig, plan: Plan, *, attempt: int = 0) -> None:
    paths = resolve_paths(config, "alice", FS)
    built = job_environment(config, plan, user="alice", paths=paths, app="app-0", attempt=attempt)
    for t in plan.tasks:
        role = config.role(t.role)
        expected = {
            **script_task_env(config, plan, user="alice", role=role, index=t.index, paths=paths,
                              container_id="cid", app="app-0"),
            **runtime_task_env(config, plan, user="alice", role=role, index=t.index, default_fs_uri=FS,
                               attempt=attempt),
        }
        assert task_environment(built.shared, built.own(role, t.index, "cid")) == expected, f"{t.role}[{t.index}]"


def spread(config: JobConfig) -> Plan:
    """Every task of ``config`` on n1 or n2 in turn, with distinct ports per label."""
    tasks = []
    port = 20000
    for role in config.task_roles:
        for i in range(role.task_number):
            ports = {}
            for spec in role.ports:
                ports[spec.label] = tuple(range(port, port + spec.port_number))
                port += spec.port_number
            tasks.append(placement(role.name, i, (N1, N2)[i % 2], ports=ports))
    return make_plan(*tasks)


def test_the_two_role_job_matches_the_reference() -> None:
    assert_as_openpai(j1(), J1_PLAN, attempt=2)


@pytest.mark.parametrize("document", [
    "marketplace-v2__tensorflow-cifar10.yaml", "marketplace-v2__horovod-pytorch-synthetic-benchmark.yaml",
    "examples__tensorflow_cifar10__cifar10_vgg16_tf_gpu_distributed.yaml",
    "examples__pytorch_cifar10__Resnet18_horovod.yaml", "docs__cluster-user__examples__hello-world-job.yaml",
])
def test_openpais_own_jobs_match_the_reference(document: str) -> None:
    config = v2_config((CORPUS / document).read_bytes())
    assert speaks_v1x(config)
    assert_as_openpai(config, spread(config))


def test_a_v1_job_keeps_v014s_environment_alone() -> None:
    config = make_config(role_dict("Worker_A", taskNumber=2), role_dict("ps"))
    assert not speaks_v1x(config)
    env = env_of(config, spread(config), "Worker_A", 1)
    assert env["PAI_JOB_NAME"] == "job1" and env["PAI_CONTAINER_HOST_PORT_LIST"] == "http:20002;ssh:20003"
    assert not [k for k in env if k.startswith("FC_") or "workera" in k]
    assert "PAI_FRAMEWORK_NAME" not in env and "PAI_TASK_ROLE_INSTANCES" not in env
    tf = load_seed_config(seed_configs.TF_EXAMPLE_000)
    assert "FC_FRAMEWORK_NAME" not in env_of(make_config(*tf["taskRoles"]), spread(make_config(*tf["taskRoles"])),
                                             tf["taskRoles"][0]["name"], 0)


# --- what the scheduler sends: the role's image, the command as mapped ------------------------------


def test_a_launch_carries_each_roles_image_and_the_unrendered_command() -> None:
    config = j1()
    launch = job_launch(make_job(config, attempt=1), J1_PLAN, FS)
    specs = {(s.role, s.index): s for s in launch.specs()}
    assert specs[("ps", 0)].image == "local/busybox:latest"
    assert specs[("Worker_A", 1)].image == "registry.example:5000/team/worker:1"
    assert specs[("Worker_A", 1)].command == "train --token '<% $secrets.token %>' --steps 10"
    assert not [s for s in specs.values() if "s3cr3t" in s.model_dump_json()]
    assert not [v for v in launch.job_env.values() if "s3cr3t" in v]
    assert launch.job_env["FC_FRAMEWORK_ATTEMPT_ID"] == "1"


# --- the size at submit ----------------------------------------------------------------------------


def as_v2(config: JobConfig) -> JobConfig:
    """``config`` as a v2 job runs it: every role names its image."""
    return config.model_copy(update={"task_roles": tuple(r.model_copy(update={"image": config.image})
                                                        for r in config.task_roles)})


@pytest.mark.parametrize("roles", [
    [("worker", 3)], [("Worker_A", 12), ("ps", 1)], [("a_b", 101), ("Chief", 1), ("w2", 10)]])
def test_the_estimate_is_a_v2_tasks_real_size_on_a_worst_case_placement(roles: list[tuple[str, int]]) -> None:
    config = as_v2(make_config(*(role_dict(name, taskNumber=n, gpuNumber=1) for name, n in roles)))
    plan = worst_plan(config)
    paths = resolve_paths(config, "alice", FS)
    real = max(exec_bytes(build_task_env(config, plan, user="alice", role=r, index=r.task_number - 1, paths=paths,
                                         container_id="c" * CONTAINER_NAME_MAX, app=worst_app_id(config, "alice"),
                                         attempt=WORST_ATTEMPT))
               for r in config.task_roles)
    assert estimate(config, user="alice", paths=paths).total == real


def test_a_v2_job_whose_instances_list_passes_max_arg_strlen_is_refused() -> None:
    name = "r" * 64  # the longest role name: 66 to 70 bytes a task in PAI_TASK_ROLE_INSTANCES
    v1 = with_tasks(make_config(role_dict(name)), 1900)
    assert problems(v1) == []  # a v1 job has no such list, and fewer variables
    found = problems(as_v2(v1))
    assert [p for p in found if p.startswith("taskRoles: variable PAI_TASK_ROLE_INSTANCES would be up to ")], found
    assert any("it names every task as <role>:<index> (1,900 tasks)" in p for p in found)
    assert any(p.startswith("taskRoles: one task's environment would be up to ") for p in found)
    assert problems(as_v2(with_tasks(make_config(role_dict(name)), 1750))) == []

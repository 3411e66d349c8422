"""The PAI_* environment of a task (both generations of OpenPAI's tables), paths, and container names."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.admission.validation import Accepted, validate_job_config
from shared.jobconfig.model import JobConfig
from shared.scheduling.placement import ClusterSnapshot, Plan, place
from shared.tasks.envvars import (
    JobPaths,
    build_task_env,
    env_name,
    job_environment,
    resolve_paths,
    substitute,
    task_environment,
)
from shared.tasks.launchspec import container_name, job_launch, placed_tasks, task_specs
from tests.unit import seed_configs
from tests.unit.envvars_reference import script_task_env
from tests.unit.factories import (
    load_seed_config,
    make_config,
    make_job,
    make_node,
    make_plan,
    placement,
    port_dict,
    role_dict,
)

pytestmark = pytest.mark.unit

FS = "hdfs://nn:9000"
N1 = make_node("n1", ip="10.0.0.1", gpus=["V100"] * 4)
N2 = make_node("n2", ip="10.0.0.2", gpus=["V100"] * 4)


def seed_config(text: str) -> JobConfig:
    result = validate_job_config(load_seed_config(text))
    assert isinstance(result, Accepted)
    return result.config


TF = seed_config(seed_configs.TF_EXAMPLE_000)
# The seed's ps/worker job spread over two nodes: one ps and one worker on each.
TF_PLAN = make_plan(
    placement("ps_server", 0, N1, ports={"http": (20000,), "ssh": (20001,)}),
    placement("ps_server", 1, N2, ports={"http": (20010,), "ssh": (20011,)}),
    placement("worker", 0, N1, gpus=(0, 1, 2, 3), ports={"http": (20002,), "ssh": (20003,)}),
    placement("worker", 1, N2, gpus=(0, 1, 2, 3), ports={"http": (20012,), "ssh": (20013,)}),
)


def env_for(config: JobConfig, plan: Plan, role: str, index: int, *, user: str = "alice",
            fs: str = FS, container_id: str = "cid", app: str = "alice~job~0a1b2c3d-0") -> dict[str, str]:
    return build_task_env(config, plan, user=user, role=config.role(role), index=index,
                          paths=resolve_paths(config, user, fs), container_id=container_id, app=app)


@pytest.fixture(scope="module")
def worker1() -> dict[str, str]:
    return env_for(TF, TF_PLAN, "worker", 1, container_id="paiq-alice-worker-1")


@pytest.fixture(scope="module")
def ps0() -> dict[str, str]:
    return env_for(TF, TF_PLAN, "ps_server", 0)


# --- the TensorFlow example of seed 000 -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        # every task sees the other tasks: hosts in task index order, each with its http port
        ("PAI_TASK_ROLE_ps_server_HOST_LIST", "10.0.0.1:20000,10.0.0.2:20010"),
        ("PAI_TASK_ROLE_worker_HOST_LIST", "10.0.0.1:20002,10.0.0.2:20012"),
        ("PAI_ps_server_0_http_PORT", "20000"),
        ("PAI_ps_server_1_ssh_PORT", "20011"),
        ("PAI_worker_0_ssh_PORT", "20003"),
        ("PAI_HOST_IP_worker_1", "10.0.0.2"),
        ("PAI_HOST_IP_ps_server_0", "10.0.0.1"),
        ("PAI_PORT_LIST_worker_1_ssh", "20013"),
        ("PAI_PORT_LIST_ps_server_1_http", "20010"),
        ("PAI_RESOURCE_worker", "4,2,16384,64"),
        ("PAI_RESOURCE_ps_server", "0,2,8192,64"),
        ("PAI_MIN_SUCCEEDED_TASK_COUNT_worker", "2"),
        ("PAI_MIN_SUCCEEDED_TASK_COUNT_ps_server", ""),
        ("PAI_MIN_FAILED_TASK_COUNT_worker", "1"),
        ("PAI_TASK_ROLE_TASK_COUNT_worker", "2"),
        ("PAI_TASK_ROLE_TASK_COUNT_ps_server", "2"),
        ("PAI_JOB_TASK_COUNT", "4"),
        ("PAI_JOB_TASK_ROLE_COUNT", "2"),
        ("PAI_TASK_ROLE_COUNT", "2"),
        ("PAI_JOB_TASK_ROLE_LIST", "ps_server,worker"),
        ("PAI_TASK_ROLE_LIST", "ps_server,worker"),
        # this task: worker 1 on n2
        ("PAI_CONTAINER_HOST_IP", "10.0.0.2"),
        ("PAI_CONTAINER_HOST_PORT_LIST", "http:20012;ssh:20013"),
        ("PAI_CONTAINER_HOST_http_PORT_LIST", "20012"),
        ("PAI_CONTAINER_HOST_ssh_PORT_LIST", "20013"),
        ("PAI_CONTAINER_HOST_PORT", "20012"),
        ("PAI_CONTAINER_SSH_PORT", "20013"),
        ("PAI_CURRENT_CONTAINER_IP", "10.0.0.2"),
        ("PAI_CURRENT_CONTAINER_PORT", "20012"),
        ("PAI_CURRENT_TASK_ROLE_NAME", "worker"),
        ("PAI_TASK_ROLE_NAME", "worker"),
        ("PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX", "1"),
        ("PAI_TASK_INDEX", "1"),
        ("PAI_TASK_ROLE_INDEX", "1"),
        ("PAI_CURRENT_TASK_ROLE_TASK_COUNT", "2"),
        ("PAI_TASK_ROLE_NUM", "2"),
        ("PAI_CURRENT_TASK_ROLE_CPU_COUNT", "2"),
        ("PAI_TASK_CPU_NUM", "2"),
        ("PAI_CURRENT_TASK_ROLE_MEM_MB", "16384"),
        ("PAI_TASK_MEM_MB", "16384"),
        ("PAI_CURRENT_TASK_ROLE_SHM_MB", "64"),
        ("PAI_CURRENT_TASK_ROLE_GPU_COUNT", "4"),
        ("PAI_TASK_GPU_NUM", "4"),
        ("PAI_RESOURCE", "4,2,16384,64"),
        ("PAI_CURRENT_TASK_ROLE_MIN_FAILED_TASK_COUNT", "1"),
        ("PAI_CURRENT_TASK_ROLE_MIN_SUCCEEDED_TASK_COUNT", "2"),
        ("PAI_CONTAINER_ID", "paiq-alice-worker-1"),
        # job level
        ("PAI_JOB_NAME", "tensorflow-distributed-jobguid"),
        ("FRAMEWORK_NAME", "alice~tensorflow-distributed-jobguid"),
        ("APP_ID", "alice~job~0a1b2c3d-0"),
        ("PAI_USER_NAME", "alice"),
        ("PAI_USERNAME", "alice"),
        ("HADOOP_USER_NAME", "alice"),
        ("PAI_TASKS_NUM", "4"),
        ("PAI_TASK_ROLES_NUM", "2"),
        ("PAI_JOB_VC_NAME", "your_virtual_cluster"),
        ("PAI_DEFAULT_FS_URI", FS),
        ("PAI_WORK_DIR", "/pai"),
        ("PAI_DATA_DIR", f"{FS}/path/tensorflow-distributed-jobguid/data"),
        ("PAI_OUTPUT_DIR", f"{FS}/path/tensorflow-distributed-jobguid/output"),
        ("PAI_CODE_DIR", f"{FS}/path/tensorflow-distributed-jobguid/code"),
        # jobEnvs on top, as text
        ("batch_size", "32"),
        ("job_model", "resnet20"),
    ],
)
def test_tensorflow_worker_env(worker1: dict[str, str], name: str, value: str) -> None:
    assert worker1[name] == value


def test_ps_task_sees_the_same_job_wide_values_and_its_own(ps0: dict[str, str], worker1: dict[str, str]) -> None:
    own = {"PAI_TASK_ROLE_NAME", "PAI_TASK_ROLE_NUM", "PAI_TASK_ROLE_INDEX"}  # the script's aliases of the task's own
    job_wide = [k for k in worker1 if k.startswith(("PAI_TASK_ROLE_", "PAI_HOST_IP_", "PAI_PORT_LIST_",
                                                    "PAI_RESOURCE_", "PAI_ps_server_", "PAI_worker_"))
                and k not in own]
    assert len(job_wide) > 20
    assert {k: ps0[k] for k in job_wide} == {k: worker1[k] for k in job_wide}
    assert ps0["PAI_CURRENT_TASK_ROLE_NAME"] == "ps_server"
    assert ps0["PAI_CONTAINER_HOST_PORT_LIST"] == "http:20000;ssh:20001"
    assert ps0["PAI_CURRENT_TASK_ROLE_MIN_SUCCEEDED_TASK_COUNT"] == ""
    assert ps0["NVIDIA_VISIBLE_DEVICES"] == "void", "a task without GPUs is handed none"


def test_a_task_given_gpus_gets_no_gpu_variable_from_paiq(worker1: dict[str, str]) -> None:
    # The engine's device request sets NVIDIA_VISIBLE_DEVICES itself (host ids, for NVIDIA's runtime);
    # inside, CUDA numbers the task's GPUs from 0, so a CUDA_VISIBLE_DEVICES of host ids would hide them.
    assert "NVIDIA_VISIBLE_DEVICES" not in worker1 and "CUDA_VISIBLE_DEVICES" not in worker1


def test_every_value_is_text_and_every_platform_name_is_a_valid_variable(worker1: dict[str, str]) -> None:
    assert all(isinstance(v, str) for v in worker1.values())
    platform = [k for k in worker1 if k not in TF.job_envs]
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) for k in platform)


def test_env_from_a_real_placement_on_two_nodes() -> None:
    # 4 CPUs a node: both ps servers fill n1, both workers go to n2.
    small = [make_node(f"n{i}", ip=f"10.0.0.{i}", cpus=4, memory_mb=40960, gpus=["V100"] * 8) for i in (1, 2)]
    plan = place(ClusterSnapshot.build(small, []), TF)
    assert isinstance(plan, Plan)
    assert {t.node_id for t in plan.tasks} == {"n1", "n2"}
    env = env_for(TF, plan, "worker", 0)
    for role in ("ps_server", "worker"):
        expected = ",".join(f"{plan.for_task(role, i).ip}:{plan.for_task(role, i).ports['http'][0]}"
                            for i in range(2))
        assert env[f"PAI_TASK_ROLE_{role}_HOST_LIST"] == expected
    me = plan.for_task("worker", 0)
    assert env["PAI_CONTAINER_HOST_PORT_LIST"] == f"http:{me.ports['http'][0]};ssh:{me.ports['ssh'][0]}"


def test_several_ports_per_label() -> None:
    config = make_config(role_dict("r", portList=[port_dict("http", 0, 3), port_dict("ssh", 0, 1)]))
    plan = make_plan(placement("r", 0, N1, ports={"http": (21000, 21001, 21002), "ssh": (21003,)}))
    env = env_for(config, plan, "r", 0)
    assert env["PAI_CONTAINER_HOST_PORT_LIST"] == "http:21000,21001,21002;ssh:21003"
    assert env["PAI_CONTAINER_HOST_http_PORT_LIST"] == "21000,21001,21002"
    assert env["PAI_PORT_LIST_r_0_http"] == "21000,21001,21002"
    assert env["PAI_TASK_ROLE_r_HOST_LIST"] == "10.0.0.1:21000"
    assert env["PAI_CONTAINER_HOST_PORT"] == "21000"


def test_a_role_without_ports_gets_an_http_and_an_ssh_port_as_in_openpai() -> None:
    config = make_config(role_dict("r", taskNumber=2))
    nodes = [make_node(f"n{i}", ip=f"10.0.0.{i}", cpus=1, port_range=(30000, 30100)) for i in (1, 2)]
    plan = place(ClusterSnapshot.build(nodes, []), config)
    assert isinstance(plan, Plan)
    env = env_for(config, plan, "r", 1)
    assert {plan.for_task("r", 0).node_id, plan.for_task("r", 1).node_id} == {"n1", "n2"}
    assert env["PAI_TASK_ROLE_r_HOST_LIST"] == f"{plan.for_task('r', 0).ip}:30000,{plan.for_task('r', 1).ip}:30000"
    assert env["PAI_CONTAINER_HOST_PORT_LIST"] == "http:30000;ssh:30001"
    assert (env["PAI_CONTAINER_HOST_PORT"], env["PAI_CURRENT_CONTAINER_PORT"], env["PAI_CONTAINER_SSH_PORT"]) == (
        "30000", "30000", "30001")
    assert (env["PAI_r_0_ssh_PORT"], env["PAI_PORT_LIST_r_1_http"]) == ("30001", "30000")


def test_a_role_declaring_its_own_http_ports_keeps_them_and_gets_one_ssh_port() -> None:
    config = make_config(role_dict("r", portList=[port_dict("http", 0, 2), port_dict("tb", 0, 1)]))
    plan = place(ClusterSnapshot.build([make_node("n1", ip="10.0.0.1", port_range=(30000, 30100))], []), config)
    assert isinstance(plan, Plan)
    env = env_for(config, plan, "r", 0)
    assert env["PAI_CONTAINER_HOST_PORT_LIST"] == "http:30000,30001;tb:30002;ssh:30003"
    assert env["PAI_CONTAINER_HOST_PORT"] == "30000" and env["PAI_CONTAINER_SSH_PORT"] == "30003"
    assert env["PAI_TASK_ROLE_r_HOST_LIST"] == "10.0.0.1:30000"


def test_a_placement_without_an_http_port_lists_the_bare_ip() -> None:
    # Plans placed before every role had an http port (a relaunch of such a job) still give a host list.
    config = make_config(role_dict("r", taskNumber=2))
    env = env_for(config, make_plan(placement("r", 0, N1), placement("r", 1, N2)), "r", 1)
    assert env["PAI_TASK_ROLE_r_HOST_LIST"] == "10.0.0.1,10.0.0.2"
    assert env["PAI_CONTAINER_HOST_PORT_LIST"] == "" and env["PAI_CONTAINER_HOST_PORT"] == ""


@pytest.mark.parametrize(
    ("value", "text"),
    [(True, "true"), (False, "false"), (32, "32"), (0.5, "0.5"), ("resnet20", "resnet20"),
     ("$PAI_JOB_NAME", "$PAI_JOB_NAME"), ("", "")],
)
def test_job_envs_go_in_verbatim_with_json_booleans(value: object, text: str) -> None:
    config = make_config(jobEnvs={"v": value})
    assert env_for(config, make_plan(placement("main", 0, N1)), "main", 0)["v"] == text


def test_job_envs_are_applied_on_top_of_platform_variables() -> None:
    config = make_config(jobEnvs={"PAI_WORK_DIR": "/mine", "isDebug": True})
    env = env_for(config, make_plan(placement("main", 0, N1)), "main", 0)
    assert env["PAI_WORK_DIR"] == "/mine"
    assert env["isDebug"] == "true"


def test_min_failed_null_is_an_empty_value() -> None:
    config = make_config(role_dict("r", minFailedTaskCount=None))
    env = env_for(config, make_plan(placement("r", 0, N1)), "r", 0)
    assert env["PAI_MIN_FAILED_TASK_COUNT_r"] == ""
    assert env["PAI_CURRENT_TASK_ROLE_MIN_FAILED_TASK_COUNT"] == ""


# --- the Jupyter job of seed 004 ------------------------------------------------------------------


def test_seed_004_jupyter_job_gets_its_port_variable() -> None:
    config = seed_config(seed_configs.JUPYTER_004)
    assert "$PAI_CONTAINER_HOST_jupyter_PORT_LIST" in config.task_roles[0].command
    plan = place(ClusterSnapshot.build([make_node("n1", ip="192.168.30.14", gpus=["TITANX"] * 2,
                                                  port_range=(29640, 29700))], []), config)
    assert isinstance(plan, Plan)
    env = env_for(config, plan, "task_1", 0)
    assert env["PAI_CONTAINER_HOST_jupyter_PORT_LIST"] == "29640"
    assert env["PAI_CONTAINER_HOST_PORT_LIST"] == "jupyter:29640;http:29641;ssh:29642"
    assert env["PAI_TASK_ROLE_task_1_HOST_LIST"] == "192.168.30.14:29641"
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    assert env["PAI_OUTPUT_DIR"] == f"{FS}/Output/alice/jupyter_16be8b71", "outputDir \"\" means the default"
    assert env["PAI_DATA_DIR"] == "" and env["PAI_CODE_DIR"] == ""


# --- names with characters a variable name cannot hold ---------------------------------------------


@pytest.mark.parametrize(("raw", "name"), [("ps.server", "ps_server"), ("w~1", "w_1"), ("a.b~c_d", "a_b_c_d"),
                                           ("plain", "plain"), ("A9", "A9")])
def test_env_name(raw: str, name: str) -> None:
    assert env_name(raw) == name


def test_role_names_and_labels_with_dots_and_tildes_are_sanitized() -> None:
    config = make_config(role_dict("ps.server", portList=[port_dict("my.port")]), role_dict("w~1"))
    plan = make_plan(placement("ps.server", 0, N1, ports={"my.port": (20000,), "http": (20001,), "ssh": (20002,)}),
                     placement("w~1", 0, N2, ports={"http": (20000,), "ssh": (20001,)}))
    env = env_for(config, plan, "ps.server", 0)
    assert env["PAI_TASK_ROLE_ps_server_HOST_LIST"] == "10.0.0.1:20001"
    assert env["PAI_TASK_ROLE_w_1_HOST_LIST"] == "10.0.0.2:20000"
    assert env["PAI_ps_server_0_my_port_PORT"] == "20000"
    assert env["PAI_PORT_LIST_ps_server_0_my_port"] == "20000"
    assert env["PAI_CONTAINER_HOST_my_port_PORT_LIST"] == "20000"
    assert env["PAI_HOST_IP_w_1_0"] == "10.0.0.2"
    assert env["PAI_RESOURCE_w_1"] == "0,1,100,64"
    # names as values stay as the user wrote them
    assert env["PAI_CURRENT_TASK_ROLE_NAME"] == "ps.server"
    assert env["PAI_TASK_ROLE_LIST"] == "ps.server,w~1"
    assert env["PAI_CONTAINER_HOST_PORT_LIST"] == "my.port:20000;http:20001;ssh:20002"
    assert all(re.fullmatch(r"[A-Za-z0-9_]+", k) for k in env)


# --- paths ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("$PAI_DEFAULT_FS_URI/data", "hdfs://nn:9000/data"),
        ("${PAI_DEFAULT_FS_URI}/data", "hdfs://nn:9000/data"),
        ("$PAI_DEFAULT_FS_URI/Output/$PAI_USER_NAME/$PAI_JOB_NAME", "hdfs://nn:9000/Output/alice/job1"),
        ("/x/${PAI_USER_NAME}-${PAI_JOB_NAME}/y", "/x/alice-job1/y"),
        ("$HOME/$PAI_UNKNOWN/${OTHER}", "$HOME/$PAI_UNKNOWN/${OTHER}"),
        ("$PAI_JOB_NAME_suffix", "$PAI_JOB_NAME_suffix"),
        ("${PAI_JOB_NAME}_suffix", "job1_suffix"),
        ("no variables", "no variables"),
        ("", ""),
    ],
)
def test_substitute(value: str, expected: str) -> None:
    assert substitute(value, default_fs_uri=FS, job_name="job1", user="alice") == expected


def test_resolve_paths_substitutes_in_every_directory() -> None:
    config = make_config(authFile="$PAI_DEFAULT_FS_URI/auth/$PAI_USER_NAME", dataDir="${PAI_DEFAULT_FS_URI}/d",
                         outputDir="$PAI_DEFAULT_FS_URI/o/$PAI_JOB_NAME", codeDir="/local/$PAI_USER_NAME/code")
    assert resolve_paths(config, "alice", FS) == JobPaths(
        default_fs_uri=FS, auth_file=f"{FS}/auth/alice", data_dir=f"{FS}/d", output_dir=f"{FS}/o/job1",
        code_dir="/local/alice/code")


@pytest.mark.parametrize(("fs", "expected"), [("hdfs://nn:9000", "hdfs://nn:9000/Output/alice/job1"),
                                              ("file:///var/paiq/fs/", "file:///var/paiq/fs/Output/alice/job1")])
def test_default_output_dir(fs: str, expected: str) -> None:
    paths = resolve_paths(make_config(), "alice", fs)
    assert paths.output_dir == expected
    assert (paths.auth_file, paths.data_dir, paths.code_dir) == ("", "", "")


# --- container names and launch specs --------------------------------------------------------------

DOCKER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")


@pytest.mark.parametrize(
    ("job_id", "attempt", "role", "index"),
    [("alice~job1", 0, "main", 0), ("alice~tensorflow-distributed-jobguid", 3, "ps.server", 1),
     ("bob~a~b", 0, "w~1", 12), ("u~" + "x" * 255, 999, "r" * 64, 9999), ("ü~jöb", 0, "рол", 0)],
)
def test_container_name_is_docker_safe_and_deterministic(job_id: str, attempt: int, role: str, index: int) -> None:
    name = container_name(job_id, attempt, role, index)
    assert DOCKER_NAME.fullmatch(name), name
    assert name == container_name(job_id, attempt, role, index)


def test_container_names_differ_per_task_attempt_and_job() -> None:
    names = {
        container_name("alice~j", 0, "w", 0), container_name("alice~j", 1, "w", 0),
        container_name("alice~j", 0, "w", 1), container_name("alice~j", 0, "ps", 0),
        container_name("bob~j", 0, "w", 0),
        # the same readable text from different parts
        container_name("a~b-c", 0, "d", 0), container_name("a~b", 0, "c-d", 0),
        container_name("a~b.c", 0, "d", 0), container_name("a~b~c", 0, "d", 0),
    }
    assert len(names) == 9


@settings(max_examples=200, deadline=None, database=None)
@given(st.text(min_size=1, max_size=300), st.integers(0, 10**6), st.text(min_size=1, max_size=64),
       st.integers(0, 10**5))
def test_container_name_is_docker_safe_for_any_input(job_id: str, attempt: int, role: str, index: int) -> None:
    assert DOCKER_NAME.fullmatch(container_name(job_id, attempt, role, index))


def test_task_specs_for_the_tensorflow_job() -> None:
    job = make_job(TF, user="alice", attempt=2)
    specs = task_specs(job, TF_PLAN, FS)
    assert [(s.role, s.index) for s in specs] == [("ps_server", 0), ("ps_server", 1), ("worker", 0), ("worker", 1)]
    w1 = specs[3]
    assert (w1.job_id, w1.attempt, w1.user, w1.virtual_cluster) == (job.id, 2, "alice", "your_virtual_cluster")
    assert (w1.cpus, w1.memory_mb, w1.shm_mb, w1.gpus) == (2, 16384, 64, (0, 1, 2, 3))
    assert w1.ports == {"http": (20012,), "ssh": (20013,)}
    assert w1.image == "your_docker_registry/pai.run.tensorflow"
    assert "--job_name=worker" in w1.command
    assert w1.env == env_for(TF, TF_PLAN, "worker", 1, container_id=container_name(job.id, 2, "worker", 1),
                             app=f"{job.id}-2")
    assert len({s.env["PAI_CONTAINER_ID"] for s in specs}) == 4
    assert w1.code_dir == f"{FS}/path/tensorflow-distributed-jobguid/code"
    assert w1.auth_file == "" and w1.is_debug is False


def test_task_specs_substitute_paths_and_carry_the_debug_flag() -> None:
    config = make_config(authFile="$PAI_DEFAULT_FS_URI/auth.txt", codeDir="$PAI_DEFAULT_FS_URI/code/$PAI_JOB_NAME",
                         jobEnvs={"isDebug": True})
    spec = task_specs(make_job(config), make_plan(placement("main", 0, N1)), "file:///srv/fs")[0]
    # The URIs as substituted; the launcher resolves them under its storage root (shared/jobconfig/storagepath.py).
    assert spec.auth_file == "file:///srv/fs/auth.txt"
    assert spec.code_dir == "file:///srv/fs/code/job1"
    assert spec.is_debug is True


def test_placed_tasks_carry_the_plan() -> None:
    tasks = placed_tasks(TF_PLAN)
    assert [(t.role, t.index, t.node_id, t.ip, t.gpus, t.ports) for t in tasks] == [
        (p.role, p.index, p.node_id, p.ip, p.gpus, p.ports) for p in TF_PLAN.tasks]
    assert all(t.state == "WAITING" and t.container_id is None for t in tasks)


@pytest.mark.parametrize("gpus", [(3,), ()])
def test_job_envs_cannot_choose_the_gpus_a_task_is_handed(gpus: tuple[int, ...]) -> None:
    config = make_config(role_dict("main", gpuNumber=len(gpus)),
                         jobEnvs={"NVIDIA_VISIBLE_DEVICES": "all", "CUDA_VISIBLE_DEVICES": "0", "x": 1})
    plan = make_plan(placement("main", 0, N1, gpus=gpus))
    [spec] = task_specs(make_job(config), plan, "file:///srv/fs")
    # with GPUs the engine's device request names them; without, NVIDIA's runtime is told "void"
    assert spec.env.get("NVIDIA_VISIBLE_DEVICES") == (None if gpus else "void")
    # CUDA_VISIBLE_DEVICES counts inside the container's own GPUs: narrowing them is the job's business
    assert spec.env["CUDA_VISIBLE_DEVICES"] == "0" and spec.env["x"] == "1"


# --- the job's shared part and each task's own: the environment OpenPAI's container script made ------
#
# tests/unit/envvars_reference.py transcribes v0.14's container script for one task, naively. The
# builder makes the shared part once per job; for every task, the whole environment must be the
# script's.


def assert_same_as_the_script(config: JobConfig, plan: Plan, *, user: str = "alice", fs: str = FS) -> None:
    paths = resolve_paths(config, user, fs)
    built = job_environment(config, plan, user=user, paths=paths, app="app-1")
    for t in plan.tasks:
        role = config.role(t.role)
        cid = f"cid-{t.role}-{t.index}"
        script = script_task_env(config, plan, user=user, role=role, index=t.index, paths=paths, container_id=cid,
                                 app="app-1")
        assert task_environment(built.shared, built.own(role, t.index, cid)) == script, f"{t.role}[{t.index}]"
        assert build_task_env(config, plan, user=user, role=role, index=t.index, paths=paths,
                              container_id=cid, app="app-1") == script


# jobEnvs that collide with platform variables of every kind: job-wide, a peer's, the task's own, GPUs.
COLLIDING_JOB_ENVS = ["PAI_WORK_DIR", "PAI_TASK_INDEX", "PAI_CONTAINER_HOST_IP", "PAI_CONTAINER_HOST_PORT_LIST",
                      "PAI_CONTAINER_HOST_http_PORT_LIST", "PAI_CONTAINER_HOST_PORT", "PAI_CONTAINER_ID",
                      "PAI_CURRENT_TASK_ROLE_NAME", "PAI_TASK_ROLE_w_HOST_LIST", "PAI_HOST_IP_w_0",
                      "PAI_w_0_http_PORT", "PAI_RESOURCE_ps_server", "NVIDIA_VISIBLE_DEVICES",
                      "CUDA_VISIBLE_DEVICES", "batch_size"]


@st.composite
def configs_and_plans(draw: st.DrawFn) -> tuple[JobConfig, Plan]:
    names = draw(st.lists(st.sampled_from(["w", "ps.server", "x~1", "chief", "w2", "A9"]), min_size=1, max_size=4,
                          unique=True))
    roles = []
    for name in names:
        labels = draw(st.lists(st.sampled_from(["http", "ssh", "my.port", "x~y"]), max_size=3, unique=True))
        roles.append(role_dict(
            name, taskNumber=draw(st.integers(1, 4)), gpuNumber=draw(st.integers(0, 2)),
            minFailedTaskCount=draw(st.sampled_from([None, 1])),
            portList=[port_dict(lb, 0, draw(st.integers(1, 3))) for lb in labels]))
    text = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=5)  # no NUL
    job_envs = draw(st.dictionaries(st.sampled_from(COLLIDING_JOB_ENVS),
                                    st.one_of(st.booleans(), st.integers(-5, 5), text), max_size=5))
    config = make_config(*roles, jobEnvs=job_envs)
    nodes = [N1, N2, make_node("n3", ip="192.168.100.200")]
    tasks = []
    port = 20000
    for role in config.task_roles:
        for i in range(role.task_number):
            ports = {}
            for p in role.ports:
                ports[p.label] = tuple(range(port, port + p.port_number))
                port += p.port_number
            gpus = tuple(draw(st.permutations(range(4)))[: role.gpu_number])
            tasks.append(placement(role.name, i, draw(st.sampled_from(nodes)), gpus=gpus, ports=ports))
    # The plan's order is not the builder's business: shuffled, the tables must not change.
    return config, make_plan(*draw(st.permutations(tasks)))


@settings(max_examples=300, deadline=None, database=None)
@given(configs_and_plans())
def test_the_environment_is_the_container_scripts_for_every_task(case: tuple[JobConfig, Plan]) -> None:
    assert_same_as_the_script(*case)


@pytest.mark.parametrize("config", [TF, seed_config(seed_configs.JUPYTER_004)], ids=["tf-000", "jupyter-004"])
def test_the_seed_jobs_get_the_container_scripts_environment(config: JobConfig) -> None:
    plan = place(ClusterSnapshot.build([make_node(f"n{i}", gpus=["V100", "TITANX"] * 4, cpus=64, memory_mb=10**6)
                                        for i in range(3)], []), config)
    assert isinstance(plan, Plan)
    assert_same_as_the_script(config, plan)


@pytest.mark.parametrize(
    ("job_envs", "gpus", "expected"),
    [
        # jobEnvs over every platform variable: job-wide, a peer's, the task's own ...
        ({"PAI_WORK_DIR": "/mine"}, (), {"PAI_WORK_DIR": "/mine"}),
        ({"PAI_TASK_ROLE_main_HOST_LIST": "h"}, (), {"PAI_TASK_ROLE_main_HOST_LIST": "h"}),
        ({"PAI_TASK_INDEX": 7}, (), {"PAI_TASK_INDEX": "7", "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": "0"}),
        ({"PAI_CONTAINER_HOST_PORT": "1"}, (), {"PAI_CONTAINER_HOST_PORT": "1", "PAI_CONTAINER_HOST_http_PORT_LIST":
                                                "20000"}),
        ({"CUDA_VISIBLE_DEVICES": "1"}, (2, 5), {"CUDA_VISIBLE_DEVICES": "1"}),
        # ... except NVIDIA_VISIBLE_DEVICES, which says which GPUs a task is handed: never the job's
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, (), {"NVIDIA_VISIBLE_DEVICES": "void"}),
        ({}, (0, 1), {"PAI_TASK_INDEX": "0", "PAI_TASK_GPU_NUM": "2"}),
    ],
)
def test_shared_then_own_keeps_the_precedence_of_job_envs(job_envs: dict[str, object], gpus: tuple[int, ...],
                                                          expected: dict[str, str]) -> None:
    config = make_config(role_dict("main", gpuNumber=len(gpus), portList=[port_dict("http")]), jobEnvs=job_envs)
    plan = make_plan(placement("main", 0, N1, gpus=gpus, ports={"http": (20000,)}))
    built = job_environment(config, plan, user="alice", paths=resolve_paths(config, "alice", FS), app="a")
    own = built.own(config.role("main"), 0, "cid")
    env = task_environment(built.shared, own)
    assert {k: env[k] for k in expected} == expected
    # what jobEnvs set is not in the task's own part, so it cannot undo them (but NVIDIA_VISIBLE_DEVICES)
    assert not (set(own) & set(job_envs)) - {"NVIDIA_VISIBLE_DEVICES"}
    assert env == script_task_env(config, plan, user="alice", role=config.role("main"), index=0,
                                  paths=resolve_paths(config, "alice", FS), container_id="cid", app="a")


@pytest.mark.parametrize(
    ("job_env", "own", "expected"),
    [
        ({}, {}, {}),
        ({"A": "1"}, {}, {"A": "1"}),
        ({}, {"A": "1"}, {"A": "1"}),  # a launch of an older scheduler: the whole environment in the task's
        ({"A": "1", "B": "2"}, {"B": "3", "C": "4"}, {"A": "1", "B": "3", "C": "4"}),  # the task's own win
    ],
)
def test_task_environment_is_the_job_env_then_the_tasks_own(job_env: dict[str, str], own: dict[str, str],
                                                            expected: dict[str, str]) -> None:
    assert task_environment(job_env, own) == expected


def big_plan(workers: int) -> tuple[JobConfig, Plan]:
    config = make_config(role_dict("ps", taskNumber=2, portList=[port_dict("http")]),
                         role_dict("worker", taskNumber=workers, gpuNumber=1, portList=[port_dict("http")]))
    nodes = [make_node(f"n{i}", ip=f"10.0.{i // 250}.{i % 250 + 1}") for i in range(workers // 8 + 1)]
    plan = make_plan(*(placement("ps", i, nodes[0], ports={"http": (21000 + i,)}) for i in range(2)),
                     *(placement("worker", i, nodes[i // 8], gpus=(i % 8,), ports={"http": (20000 + i % 8,)})
                       for i in range(workers)))
    return config, plan


def test_a_task_own_part_does_not_grow_with_the_job_and_the_shared_part_grows_linearly() -> None:
    sizes = {}
    for workers in (10, 1000):
        config, plan = big_plan(workers)
        job = make_job(config)
        launch = job_launch(job, plan, FS)
        specs = launch.specs()
        assert len(specs) == workers + 2
        sizes[workers] = (len(launch.job_env), {len(s.env) for s in specs})
    # the same few variables of its own for every task, however large the job
    assert sizes[10][1] == sizes[1000][1] == {25, 26}
    # per task of the job: its host, its port under two names (and the roles' few fixed ones)
    assert sizes[1000][0] - sizes[10][0] == 3 * 990


def test_a_thousand_task_job_is_built_in_linear_time() -> None:
    config, plan = big_plan(2000)
    began = time.process_time()
    launch = job_launch(make_job(config), plan, FS)
    launch.specs()
    assert time.process_time() - began < 2.0, "the first builder took minutes here"


def test_launch_specs_carry_only_the_tasks_own_and_task_specs_the_whole() -> None:
    job = make_job(TF, user="alice", attempt=2)
    launch = job_launch(job, TF_PLAN, FS)
    own = {(s.role, s.index): s for s in launch.specs()}
    for whole in task_specs(job, TF_PLAN, FS):
        mine = own[(whole.role, whole.index)]
        assert whole.model_dump(exclude={"env"}) == mine.model_dump(exclude={"env"})
        assert whole.env == task_environment(launch.job_env, mine.env)
        assert "PAI_TASK_ROLE_worker_HOST_LIST" not in mine.env and "PAI_TASK_INDEX" in mine.env
    assert launch.spec("worker", 1) == own[("worker", 1)]

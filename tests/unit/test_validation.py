"""Job config validation: every rule of the v1 protocol, its defaults, and what real configs carry."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.admission.validation import MAX_CONFIG_BYTES, Accepted, Rejected, parse_job_json, validate_job_config
from shared.jobconfig.model import JobConfig
from tests.unit import seed_configs
from tests.unit.factories import config_dict, load_seed_config, port_dict, role_dict

pytestmark = pytest.mark.unit


def accepted(raw: Any) -> Accepted:
    result = validate_job_config(raw)
    assert isinstance(result, Accepted), getattr(result, "message", result)
    return result


def rejected(raw: Any) -> Rejected:
    result = validate_job_config(raw)
    assert isinstance(result, Rejected), f"expected a refusal, got {result!r}"
    assert result.problems, "a refusal must name at least one problem"
    return result


def without(d: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k != key}


# --- one rule at a time: (config, path of the problem, words the rule must contain) ---------------

REFUSALS: list[tuple[str, dict[str, Any], str, tuple[str, ...]]] = [
    ("jobName with a space", config_dict(jobName="my job"), "jobName", ("must match", "A-Za-z0-9")),
    ("jobName with a slash", config_dict(jobName="a/b"), "jobName", ("must match",)),
    ("jobName with a tilde", config_dict(jobName="a~b"), "jobName",
     ("must match", "no '~'", "user~jobName~suffix", "separates")),
    ("jobName empty", config_dict(jobName=""), "jobName", ("must match",)),
    ("jobName trailing newline", config_dict(jobName="job\n"), "jobName", ("must match",)),
    ("jobName not a string", config_dict(jobName=5), "jobName", ("string", "integer")),
    ("jobName missing", without(config_dict(), "jobName"), "jobName", ("required",)),
    ("image missing", without(config_dict(), "image"), "image", ("required",)),
    ("image empty", config_dict(image=""), "image", ("empty",)),
    ("image null", config_dict(image=None), "image", ("string", "null")),
    ("taskRoles missing", without(config_dict(), "taskRoles"), "taskRoles", ("required",)),
    ("taskRoles empty", config_dict(taskRoles=[]), "taskRoles", ("at least 1",)),
    ("taskRoles an object", config_dict(taskRoles={}), "taskRoles", ("list", "object")),
    ("a role not an object", config_dict(taskRoles=[1]), "taskRoles[0]", ("object", "integer")),
    ("role name missing", config_dict({"command": "x"}), "taskRoles[0].name", ("required",)),
    ("command missing", config_dict({"name": "r"}), "taskRoles[0].command", ("required",)),
    ("command empty", config_dict(role_dict(command="")), "taskRoles[0].command", ("empty",)),
    ("taskNumber 0", config_dict(role_dict(taskNumber=0)), "taskRoles[0].taskNumber", (">= 1", "0")),
    ("cpuNumber 0", config_dict(role_dict(cpuNumber=0)), "taskRoles[0].cpuNumber", (">= 1", "0")),
    ("memoryMB 99", config_dict(role_dict(memoryMB=99)), "taskRoles[0].memoryMB", (">= 100", "99")),
    ("gpuNumber -1", config_dict(role_dict(gpuNumber=-1)), "taskRoles[0].gpuNumber", (">= 0", "-1")),
    ("shmMB > memoryMB", config_dict(role_dict(memoryMB=1024, shmMB=1025)), "taskRoles[0].shmMB",
     ("memoryMB", "1024", "1025")),
    ("shmMB > default memoryMB", config_dict(role_dict(shmMB=101)), "taskRoles[0].shmMB", ("memoryMB", "100", "101")),
    ("role name with a dash", config_dict(role_dict(name="ps-server")), "taskRoles[0].name",
     ("must match", "A-Za-z0-9._~")),
    ("role name with a space", config_dict(role_dict(name="a b")), "taskRoles[0].name", ("must match",)),
    ("role name empty", config_dict(role_dict(name="")), "taskRoles[0].name", ("must match",)),
    ("duplicate role names", config_dict(role_dict("w"), role_dict("ps"), role_dict("w")),
     "taskRoles[2].name", ("unique", "taskRoles[0]")),
    ("port label with a dash", config_dict(role_dict(portList=[port_dict("my-port")])),
     "taskRoles[0].portList[0].label", ("must match", "A-Za-z0-9._~")),
    ("port label missing", config_dict(role_dict(portList=[{"beginAt": 0, "portNumber": 1}])),
     "taskRoles[0].portList[0].label", ("required",)),
    ("duplicate port labels", config_dict(role_dict(portList=[port_dict("ssh"), port_dict("http"),
                                                              port_dict("ssh")])),
     "taskRoles[0].portList[2].label", ("unique", "ssh")),
    ("beginAt + portNumber past 65535", config_dict(role_dict(portList=[port_dict("a", 65535, 2)])),
     "taskRoles[0].portList[0]", ("65535", "65536")),
    ("beginAt past 65535", config_dict(role_dict(portList=[port_dict("a", 65536, 1)])),
     "taskRoles[0].portList[0].beginAt", ("<= 65535",)),
    ("beginAt -1", config_dict(role_dict(portList=[port_dict("a", -1, 1)])),
     "taskRoles[0].portList[0].beginAt", (">= 0",)),
    ("portNumber 0", config_dict(role_dict(portList=[port_dict("a", 0, 0)])),
     "taskRoles[0].portList[0].portNumber", (">= 1",)),
    ("minFailedTaskCount > taskNumber", config_dict(role_dict(taskNumber=2, minFailedTaskCount=3)),
     "taskRoles[0].minFailedTaskCount", ("taskNumber", "2", "3")),
    ("minSucceededTaskCount > taskNumber", config_dict(role_dict(taskNumber=2, minSucceededTaskCount=3)),
     "taskRoles[0].minSucceededTaskCount", ("taskNumber", "2", "3")),
    ("minFailedTaskCount 0", config_dict(role_dict(minFailedTaskCount=0)),
     "taskRoles[0].minFailedTaskCount", (">= 1",)),
    ("minSucceededTaskCount 0", config_dict(role_dict(minSucceededTaskCount=0)),
     "taskRoles[0].minSucceededTaskCount", (">= 1",)),
    ("retryCount -3", config_dict(retryCount=-3), "retryCount", (">= -2", "-3", "-1 retries", "-2 starts")),
    ("retryCount 1001", config_dict(retryCount=1001), "retryCount", ("<= 1000", "-1")),
    ("taskNumber a non-integral string", config_dict(role_dict(taskNumber="1.5")), "taskRoles[0].taskNumber",
     ("integer", "string", "'1.5'")),
    ("taskNumber a non-integral number", config_dict(role_dict(taskNumber=2.5)), "taskRoles[0].taskNumber",
     ("integer", "number", "2.5")),
    ("taskNumber a bool", config_dict(role_dict(taskNumber=True)), "taskRoles[0].taskNumber",
     ("integer", "boolean")),
    ("taskNumber over 5000", config_dict(role_dict(taskNumber=5001)), "taskRoles",
     ("5,001 tasks in all", "at most 5,000 tasks per job (PAIQ_MAX_JOB_TASKS)", "environment")),
    ("memoryMB a word", config_dict(role_dict(memoryMB="abc")), "taskRoles[0].memoryMB",
     ("integer", "string", "'abc'")),
    ("memoryMB an empty string", config_dict(role_dict(memoryMB="")), "taskRoles[0].memoryMB",
     ("integer", "string", "''")),
    ("retryCount a float", config_dict(retryCount=1.5), "retryCount", ("integer", "number")),
    ("retryCount an empty string", config_dict(retryCount=""), "retryCount", ("integer", "string")),
    ("retryCount a list", config_dict(retryCount=[1]), "retryCount", ("integer", "list")),
    ("gpuNumber hexadecimal", config_dict(role_dict(gpuNumber="0x1")), "taskRoles[0].gpuNumber", ("integer",)),
    ("gpuNumber Infinity", config_dict(role_dict(gpuNumber="Infinity")), "taskRoles[0].gpuNumber", ("integer",)),
    ("gpuNumber with an underscore", config_dict(role_dict(gpuNumber="1_0")), "taskRoles[0].gpuNumber",
     ("integer",)),
    ("cpuNumber past safe integers", config_dict(role_dict(cpuNumber="1e400")), "taskRoles[0].cpuNumber",
     ("integer", "'1e400'")),
    ("cpuNumber a huge number", config_dict(role_dict(cpuNumber=1e300)), "taskRoles[0].cpuNumber",
     ("integer", "number")),
    ("minFailedTaskCount a word", config_dict(role_dict(minFailedTaskCount="one")),
     "taskRoles[0].minFailedTaskCount", ("integer", "'one'")),
    ("beginAt a null", config_dict(role_dict(portList=[{"label": "a", "beginAt": None}])),
     "taskRoles[0].portList[0].beginAt", ("integer", "null")),
    ("portNumber a non-integral string", config_dict(role_dict(portList=[{"label": "a", "portNumber": "2.5"}])),
     "taskRoles[0].portList[0].portNumber", ("integer", "'2.5'")),
    ("portNumber 0 as a string", config_dict(role_dict(portList=[{"label": "a", "portNumber": "0"}])),
     "taskRoles[0].portList[0].portNumber", (">= 1", "0")),
    ("killAllOnCompletedTaskNumber not an integer", config_dict(killAllOnCompletedTaskNumber="all"),
     "killAllOnCompletedTaskNumber", ("integer", "obsolete", "minFailedTaskCount")),
    ("killAllOnCompletedTaskNumber past JavaScript's safe integers", config_dict(killAllOnCompletedTaskNumber=2**53),
     "killAllOnCompletedTaskNumber", ("safe integers", "obsolete", str(2**53))),
    ("beginAt a bool", config_dict(role_dict(portList=[port_dict("a", True, 1)])),
     "taskRoles[0].portList[0].beginAt", ("integer", "boolean")),
    ("portList an object", config_dict(role_dict(portList={"label": "a"})), "taskRoles[0].portList",
     ("list", "object")),
    ("jobEnvs key with a dash", config_dict(jobEnvs={"batch-size": 1}), "jobEnvs.batch-size",
     ("key", r"\w+")),
    ("jobEnvs nested object", config_dict(jobEnvs={"opts": {"a": 1}}), "jobEnvs.opts",
     ("string, number or boolean", "object")),
    ("jobEnvs list value", config_dict(jobEnvs={"opts": [1, 2]}), "jobEnvs.opts",
     ("string, number or boolean", "list")),
    ("jobEnvs null value", config_dict(jobEnvs={"opts": None}), "jobEnvs.opts",
     ("string, number or boolean", "null")),
    ("jobEnvs a list", config_dict(jobEnvs=["a"]), "jobEnvs", ("object", "list")),
    ("extras key with a space", config_dict(extras={"my key": 1}), "extras.my key",
     ("key", "A-Za-z0-9._")),
    ("extras key with a tilde", config_dict(extras={"a~b": 1}), "extras.a~b", ("key",)),
    ("extras a string", config_dict(extras="x"), "extras", ("object", "string")),
    ("virtualCluster with a space", config_dict(virtualCluster="my vc"), "virtualCluster", ("must match",)),
]


@pytest.mark.parametrize(("raw", "path", "words"), [c[1:] for c in REFUSALS], ids=[c[0] for c in REFUSALS])
def test_refusal_names_the_path_and_the_rule(raw: dict[str, Any], path: str, words: tuple[str, ...]) -> None:
    result = rejected(raw)
    at_path = [p for p in result.problems if p.path == path]
    assert at_path, f"no problem at {path}; got {result.message}"
    rule = at_path[0].rule
    for word in words:
        assert word in rule, f"rule {rule!r} at {path} does not say {word!r}"
    assert path in result.message


def test_one_answer_lists_every_problem() -> None:
    raw = config_dict(
        role_dict("a", taskNumber=0),
        role_dict("b", memoryMB=200, shmMB=300, minFailedTaskCount=2),
        jobName="bad name", retryCount=-3,
    )
    paths = {p.path for p in rejected(raw).problems}
    assert paths >= {"jobName", "retryCount", "taskRoles[0].taskNumber", "taskRoles[1].shmMB",
                     "taskRoles[1].minFailedTaskCount"}


def test_problems_are_not_repeated() -> None:
    result = rejected(config_dict(role_dict("r"), role_dict("r"), role_dict("r")))
    keys = [(p.path, p.rule) for p in result.problems]
    assert len(keys) == len(set(keys))
    assert {p.path for p in result.problems} == {"taskRoles[1].name", "taskRoles[2].name"}


# --- what is accepted, and the defaults -------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "A-b_c.d-e", "tensorflow-distributed-jobguid", "x" * 255, "0"])
def test_job_name_pattern_accepts(name: str) -> None:
    assert accepted(config_dict(jobName=name)).config.job_name == name


@pytest.mark.parametrize("name", ["ps_server", "w.1", "a~b", "R0"])
def test_role_name_pattern_accepts(name: str) -> None:
    assert accepted(config_dict(role_dict(name))).config.task_roles[0].name == name


@pytest.mark.parametrize(("begin_at", "count"), [(0, 1000), (65535, 1), (65000, 536), (1, 1)])
def test_port_spans_up_to_65535_are_accepted(begin_at: int, count: int) -> None:
    role = accepted(config_dict(role_dict(portList=[port_dict("p", begin_at, count)]))).config.task_roles[0]
    assert (role.port_list[0].begin_at, role.port_list[0].port_number) == (begin_at, count)


def test_defaults_of_a_minimal_config() -> None:
    config = accepted({"jobName": "j", "image": "img", "taskRoles": [{"name": "r", "command": "c"}]}).config
    role = config.task_roles[0]
    assert (role.task_number, role.cpu_number, role.memory_mb, role.shm_mb, role.gpu_number) == (1, 1, 100, 64, 0)
    assert role.port_list == ()
    assert role.min_failed_task_count == 1
    assert role.min_succeeded_task_count is None
    assert config.virtual_cluster == "default"
    assert config.retry_count == 0
    assert (config.auth_file, config.data_dir, config.output_dir, config.code_dir, config.gpu_type) == ("",) * 5
    assert config.job_envs == {}
    assert config.extras == {}


def test_min_failed_null_is_kept_as_none_while_absent_means_one() -> None:
    explicit_null = accepted(config_dict(role_dict(minFailedTaskCount=None))).config.task_roles[0]
    absent = accepted(config_dict(role_dict())).config.task_roles[0]
    assert explicit_null.min_failed_task_count is None
    assert absent.min_failed_task_count == 1


def test_min_succeeded_null_and_set() -> None:
    roles = accepted(config_dict(role_dict("a", minSucceededTaskCount=None),
                                 role_dict("b", taskNumber=3, minSucceededTaskCount=3))).config.task_roles
    assert roles[0].min_succeeded_task_count is None
    assert roles[1].min_succeeded_task_count == 3


@pytest.mark.parametrize(
    ("field", "value", "attr", "default"),
    [
        ("authFile", None, "auth_file", ""),
        ("authFile", "", "auth_file", ""),
        ("dataDir", None, "data_dir", ""),
        ("outputDir", None, "output_dir", ""),
        ("codeDir", "", "code_dir", ""),
        ("virtualCluster", None, "virtual_cluster", "default"),
        ("virtualCluster", "", "virtual_cluster", "default"),
        ("gpuType", None, "gpu_type", ""),
        ("gpuType", "", "gpu_type", ""),
        ("retryCount", None, "retry_count", 0),
        ("jobEnvs", None, "job_envs", {}),
        ("extras", None, "extras", {}),
    ],
)
def test_null_or_empty_optional_top_field_gets_its_default(field: str, value: Any, attr: str, default: Any) -> None:
    result = accepted(config_dict(**{field: value}))
    assert getattr(result.config, attr) == default
    assert result.raw[field] == value, "the stored config keeps what was submitted"


@pytest.mark.parametrize(
    ("field", "attr", "default"),
    [("taskNumber", "task_number", 1), ("cpuNumber", "cpu_number", 1), ("memoryMB", "memory_mb", 100),
     ("shmMB", "shm_mb", 64), ("gpuNumber", "gpu_number", 0), ("portList", "port_list", ())],
)
def test_null_optional_role_field_gets_its_default(field: str, attr: str, default: Any) -> None:
    role = accepted(config_dict({**role_dict(), field: None})).config.task_roles[0]
    assert getattr(role, attr) == default


def test_values_are_normalised_to_snake_case_fields() -> None:
    config = accepted(config_dict(
        role_dict("w", taskNumber=3, cpuNumber=4, memoryMB=2048, shmMB=512, gpuNumber=2,
                  portList=[port_dict("ssh", 0, 2)], minFailedTaskCount=2, minSucceededTaskCount=1),
        gpuType="V100", retryCount=3, virtualCluster="vc1",
        jobEnvs={"lr": 0.1, "steps": 10, "debug": True, "name": "x"}, extras={"a.b_c": {"any": ["thing"]}},
    )).config
    role = config.task_roles[0]
    assert (role.task_number, role.cpu_number, role.memory_mb, role.shm_mb, role.gpu_number) == (3, 4, 2048, 512, 2)
    assert (role.port_list[0].label, role.port_list[0].begin_at, role.port_list[0].port_number) == ("ssh", 0, 2)
    assert (role.min_failed_task_count, role.min_succeeded_task_count) == (2, 1)
    assert (config.gpu_type, config.retry_count, config.virtual_cluster) == ("V100", 3, "vc1")
    assert config.job_envs == {"lr": 0.1, "steps": 10, "debug": True, "name": "x"}
    assert type(config.job_envs["debug"]) is bool and type(config.job_envs["steps"]) is int
    assert config.extras == {"a.b_c": {"any": ["thing"]}}


@pytest.mark.parametrize("key", ["batch_size", "A1", "_x", "isDebug"])
def test_job_env_keys_accepted(key: str) -> None:
    assert key in accepted(config_dict(jobEnvs={key: "v"})).config.job_envs


@pytest.mark.parametrize("key", ["a.b", "A_1", "x.y.z", "0"])
def test_extras_keys_accepted(key: str) -> None:
    assert key in accepted(config_dict(extras={key: None})).config.extras


@pytest.mark.parametrize("where", ["jobEnvs", "extras"])
def test_free_map_key_with_a_trailing_newline_is_refused(where: str) -> None:
    """``$`` in Python's re matches before a final newline: ``"key\\n"`` must still be refused.

    A jobEnvs key becomes a container environment variable name; one ending in a newline is not a
    name any shell can read (and splits an env file in two).
    """
    result = rejected(config_dict(**{where: {"key\n": "v"}}))
    assert [p.path for p in result.problems] == [f"{where}.key\n"]


# --- unknown fields -------------------------------------------------------------------------


def test_unknown_fields_are_accepted_with_a_warning_naming_their_path() -> None:
    raw = config_dict(
        role_dict(storageGB=5, portList=[{**port_dict("ssh"), "protocol": "tcp"}]),
        tmp={"vgInfo": {"名称": "test"}},
    )
    result = accepted(raw)
    warned = {w.split(":")[0] for w in result.warnings}
    assert warned == {"tmp", "taskRoles[0].storageGB", "taskRoles[0].portList[0].protocol"}
    assert all("unknown field" in w for w in result.warnings)
    assert result.raw == raw, "the stored config keeps the unknown fields"


def test_a_known_config_has_no_warnings() -> None:
    assert accepted(config_dict()).warnings == ()


# --- the seeds' examples ----------------------------------------------------------------------


def test_seed_000_tensorflow_example_is_accepted() -> None:
    config = accepted(load_seed_config(seed_configs.TF_EXAMPLE_000)).config
    assert [r.name for r in config.task_roles] == ["ps_server", "worker"]
    ps, worker = config.task_roles
    assert (ps.task_number, ps.cpu_number, ps.memory_mb, ps.gpu_number, ps.shm_mb) == (2, 2, 8192, 0, 64)
    assert (worker.gpu_number, worker.memory_mb, worker.min_succeeded_task_count) == (4, 16384, 2)
    assert [p.label for p in worker.port_list] == ["http", "ssh"]
    assert config.virtual_cluster == "your_virtual_cluster"
    assert config.data_dir == "$PAI_DEFAULT_FS_URI/path/tensorflow-distributed-jobguid/data"
    assert config.job_envs == {"batch_size": 32, "job_model": "resnet20"}


def test_seed_002_tensorflow_example_with_extras_is_accepted() -> None:
    result = accepted(load_seed_config(seed_configs.TF_EXAMPLE_002))
    assert result.config.extras == {}
    assert result.warnings == ()


@pytest.mark.parametrize("text", [seed_configs.HELLOWORLD_004, seed_configs.JUPYTER_004],
                         ids=["helloworld", "jupyter"])
def test_seed_004_examples_are_accepted_with_warnings_for_unknown_fields(text: str) -> None:
    raw = load_seed_config(text)
    result = accepted(raw)
    role = result.config.task_roles[0]
    assert role.min_failed_task_count is None, "an explicit null keeps its meaning"
    assert role.min_succeeded_task_count is None
    assert result.config.auth_file == ""
    assert result.config.gpu_type == "TITANX"
    assert sorted(w.split(":")[0] for w in result.warnings) == ["taskRoles[0].storageGB", "tmp"]
    assert result.raw["tmp"] == raw["tmp"]


@pytest.mark.parametrize("name", ["TF_EXAMPLE_000", "TF_EXAMPLE_002", "HELLOWORLD_004", "JUPYTER_004"])
def test_every_seed_config_is_accepted_and_gives_back_what_it_stored(name: str) -> None:
    raw = load_seed_config(getattr(seed_configs, name))
    result = accepted(raw)
    assert result.raw == raw
    assert all(w.endswith("(kept in the stored config)") for w in result.warnings)


def test_seed_configs_are_all_tested() -> None:
    assert sorted(n for n in vars(seed_configs) if n.isupper()) == sorted(
        ["TF_EXAMPLE_000", "TF_EXAMPLE_002", "HELLOWORLD_004", "JUPYTER_004"])


# --- the body: parse_job_json -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"", ("empty",)),
        (b"{", ("not valid JSON",)),
        (b"jobName: x", ("not valid JSON",)),
        (b"\xff\xfe\xfd", ("not valid JSON",)),
        (b"[]", ("object", "list")),
        (b'"a string"', ("object", "string")),
        (b"42", ("object", "integer")),
        (b"null", ("object", "null")),
        (b"true", ("object", "boolean")),
    ],
)
def test_parse_refuses_bodies_that_are_not_a_json_object(body: bytes, words: tuple[str, ...]) -> None:
    result = parse_job_json(body)
    assert isinstance(result, Rejected)
    assert result.problems[0].path == "(body)"
    for word in words:
        assert word in result.problems[0].rule


def test_parse_refuses_a_body_over_one_megabyte() -> None:
    body = json.dumps(config_dict(extras={"pad": "x" * MAX_CONFIG_BYTES})).encode()
    result = parse_job_json(body)
    assert isinstance(result, Rejected)
    assert "1048576" in result.problems[0].rule and str(len(body)) in result.problems[0].rule


def test_parse_accepts_a_body_of_exactly_one_megabyte() -> None:
    head = json.dumps(config_dict(extras={"pad": ""})).encode()
    body = head.replace(b'"pad": ""', b'"pad": "' + b"x" * (MAX_CONFIG_BYTES - len(head)) + b'"')
    assert len(body) == MAX_CONFIG_BYTES
    assert isinstance(parse_job_json(body), dict)


@pytest.mark.parametrize("body", [json.dumps(config_dict()), json.dumps(config_dict()).encode(),
                                  "\ufeff".encode() + json.dumps(config_dict()).encode()],
                         ids=["str", "bytes", "utf8-bom"])
def test_parse_then_validate(body: str | bytes) -> None:
    parsed = parse_job_json(body)
    assert isinstance(parsed, dict) and parsed == config_dict()
    assert isinstance(validate_job_config(parsed), Accepted)


@pytest.mark.parametrize(
    "body",
    [
        b"1" * 5000,  # an integer longer than Python's int-from-string limit (4300 digits)
        b'{"jobName": "j", "retryCount": ' + b"9" * 5000 + b"}",
        b"[" * 100_000,  # nesting deeper than the decoder's recursion limit, well under 1 MB
    ],
    ids=["huge-int", "huge-int-in-object", "deep-nesting"],
)
def test_parse_never_raises_on_hostile_bodies_under_the_size_limit(body: bytes) -> None:
    result = parse_job_json(body)
    assert isinstance(result, Rejected)
    assert result.problems[0].path == "(body)"


@pytest.mark.parametrize("value", [[], "x", 1, None, [config_dict()]])
def test_validate_refuses_a_non_object(value: Any) -> None:
    result = rejected(value)
    assert result.problems[0].path == "(body)"
    assert "object" in result.problems[0].rule


# --- properties -------------------------------------------------------------------------------

JSON_LEAVES = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
TOP_KEYS = ["jobName", "image", "authFile", "dataDir", "outputDir", "codeDir", "virtualCluster",
            "taskRoles", "gpuType", "retryCount", "jobEnvs", "extras"]
ROLE_KEYS = ["name", "taskNumber", "cpuNumber", "memoryMB", "shmMB", "gpuNumber", "portList", "command",
             "minFailedTaskCount", "minSucceededTaskCount"]
PROPERTY = settings(max_examples=200, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _valid_base() -> dict[str, Any]:
    return load_seed_config(seed_configs.TF_EXAMPLE_002)


def _containers(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths (from the root) of every dict and list inside ``value``."""
    out: list[tuple[Any, ...]] = []
    if isinstance(value, dict | list):
        out.append(path)
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for k, v in items:
            out.extend(_containers(v, (*path, k)))
    return out


@st.composite
def mutated_configs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid config with one to three edits: a value replaced, a key dropped or an odd key added."""
    raw = _valid_base()
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_containers(raw)))
        target: Any = raw
        for part in path:
            target = target[part]
        keys = list(target.keys()) if isinstance(target, dict) else list(range(len(target)))
        action = draw(st.sampled_from(["replace", "drop", "add"]))
        if action == "replace" and keys:
            target[draw(st.sampled_from(keys))] = draw(JSON_VALUES)
        elif action == "drop" and keys:
            del target[draw(st.sampled_from(keys))]
        elif isinstance(target, dict):
            key = draw(st.sampled_from(TOP_KEYS + ROLE_KEYS) | st.text(max_size=8))
            target[key] = draw(JSON_VALUES)
        else:
            target.append(draw(JSON_VALUES))
    return raw


def _check_result(raw: Any) -> None:
    before = copy.deepcopy(raw)
    result = validate_job_config(raw)
    assert isinstance(result, Accepted | Rejected)
    # Compared as JSON text: NaN never equals itself, yet an unchanged NaN is unchanged input.
    assert json.dumps(raw) == json.dumps(before), "validation must not modify its input"
    if isinstance(result, Rejected):
        assert result.problems and all(p.path and p.rule for p in result.problems)
    else:
        assert isinstance(result.config, JobConfig)
        # What was accepted, dumped in the protocol's spelling, is accepted again as the same config.
        again = validate_job_config(result.config.model_dump(mode="json", by_alias=True))
        assert isinstance(again, Accepted) and again.config == result.config


@PROPERTY
@given(JSON_VALUES)
def test_validate_never_raises_on_any_json_value(raw: Any) -> None:
    _check_result(raw)


@PROPERTY
@given(st.dictionaries(st.sampled_from(TOP_KEYS) | st.text(max_size=8), JSON_VALUES, max_size=8))
def test_validate_never_raises_on_objects_with_protocol_keys(raw: dict[str, Any]) -> None:
    _check_result(raw)


@PROPERTY
@given(mutated_configs())
def test_validate_never_raises_on_mutated_valid_configs(raw: dict[str, Any]) -> None:
    _check_result(raw)


@PROPERTY
@given(st.binary(max_size=512))
def test_parse_never_raises_on_arbitrary_bytes(body: bytes) -> None:
    result = parse_job_json(body)
    assert isinstance(result, dict | Rejected)


@PROPERTY
@given(JSON_VALUES)
def test_parse_of_dumped_json_gives_the_object_back_or_a_refusal(value: Any) -> None:
    try:
        body = json.dumps(value, allow_nan=False).encode()
    except ValueError:  # it holds NaN or Infinity: what Python writes for them is not JSON
        assert isinstance(parse_job_json(json.dumps(value).encode()), Rejected)
        return
    result = parse_job_json(body)
    if isinstance(value, dict):
        assert isinstance(result, dict) and result.keys() == value.keys()
    else:
        assert isinstance(result, Rejected)


# --- names that must stay distinct once they become parts of variable names -----------------------


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        (config_dict(role_dict("ps.server"), role_dict("ps_server")), "taskRoles[1].name"),
        (config_dict(role_dict("w~1"), role_dict("w.1")), "taskRoles[1].name"),
        (config_dict(role_dict(portList=[port_dict("my.port"), port_dict("my_port")])),
         "taskRoles[0].portList[1].label"),
    ],
    ids=["roles-dot-underscore", "roles-tilde-dot", "labels-dot-underscore"],
)
def test_names_that_collide_once_sanitized_for_env_vars_are_refused(raw: dict[str, Any], path: str) -> None:
    """Role names and port labels become parts of variable names with ``.``/``~`` turned into ``_``
    (OPENPAI.md). Two that differ only there would share PAI_TASK_ROLE_<role>_HOST_LIST,
    PAI_RESOURCE_<role>, PAI_CONTAINER_HOST_<label>_PORT_LIST..., one silently overwriting the other;
    such a config has to be refused like any other duplicate name."""
    result = rejected(raw)
    assert path in {p.path for p in result.problems}


def test_overlapping_fixed_ports_within_a_role_are_refused() -> None:
    """One task holds every port of its role's portList on one node: labels whose fixed ranges overlap
    can never be placed anywhere. Accepting such a job leaves it WAITING forever with a reason
    ("have port 30001 (b) taken") that blames other jobs; it has to be refused at submission."""
    raw = config_dict(role_dict(portList=[port_dict("a", 30000, 2), port_dict("b", 30001, 1)]))
    result = rejected(raw)
    assert any(p.path.startswith("taskRoles[0].portList[1]") for p in result.problems), result.message


def test_fixed_ports_that_only_touch_are_accepted() -> None:
    raw = config_dict(role_dict(portList=[port_dict("a", 30000, 2), port_dict("b", 30002, 1)]))
    assert len(accepted(raw).config.task_roles[0].port_list) == 2


@pytest.mark.parametrize(("where", "value", "path"), [
    ("jobEnvs", {"lr": float("inf")}, "jobEnvs.lr"),
    ("extras", {"deep": {"x": [1.0, float("nan")]}}, "extras.deep.x[1]"),
])
def test_non_finite_numbers_are_refused(where: str, value: dict[str, Any], path: str) -> None:
    result = validate_job_config(config_dict(**{where: value}))
    assert isinstance(result, Rejected)
    assert [(p.path, p.rule.split(",")[0]) for p in result.problems] == [(path, "must be a finite number")]

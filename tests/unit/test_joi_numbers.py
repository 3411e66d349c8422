"""Numbers as OpenPAI v0.14's Joi schema took them, and its other rules paiq now follows.

Every integer of the protocol was ``Joi.number().integer()``, validated with Joi's default conversion:
``"2"``, ``" 2 "``, ``"2.0"``, ``"2e0"`` and ``2.0`` were all the integer 2; ``"1.5"``, ``"abc"`` and
``""`` were refused. portList items defaulted ``beginAt`` 0 and ``portNumber`` 1; retryCount went down
to -2; jobName had no ``~``. (The refusals are in test_validation's REFUSALS table.)
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from shared.admission.validation import MAX_SAFE_INTEGER, joi_integer
from shared.jobconfig.lenient import JOI_INTEGER, default_keys
from shared.jobconfig.model import JobConfig, PortSpec, TaskRole
from tests.unit.factories import config_dict, port_dict, role_dict
from tests.unit.test_validation import PROPERTY, accepted, rejected

pytestmark = pytest.mark.unit


# field -> an integer it may hold in the configs below (memoryMB has to stay >= 100)
INTEGER_FIELDS = {"retryCount": 2, "taskNumber": 3, "cpuNumber": 2, "memoryMB": 200, "shmMB": 2, "gpuNumber": 2,
                  "minFailedTaskCount": 2, "minSucceededTaskCount": 2, "beginAt": 30000, "portNumber": 2}


def with_integer(field: str, value: Any) -> dict[str, Any]:
    """A config with ``value`` in ``field`` (a port field in the one port of the one role)."""
    if field == "retryCount":
        return config_dict(retryCount=value)
    if field in ("beginAt", "portNumber"):
        return config_dict(role_dict(portList=[{"label": "p", field: value}]))
    return config_dict(role_dict(**{"taskNumber": 4, "memoryMB": 1024, field: value}))


def integer_in(config: JobConfig, field: str) -> Any:
    dumped = config.model_dump(mode="json", by_alias=True)
    role = dumped["taskRoles"][0]
    return dumped[field] if field in dumped else role[field] if field in role else role["portList"][0][field]


def spellings(n: int) -> list[Any]:
    return [n, str(n), f" {n}\n", f"{n}.0", f"+{n}", f"{n}.000e0", float(n)]


@pytest.mark.parametrize(("field", "value"), [(f, v) for f, n in INTEGER_FIELDS.items() for v in spellings(n)],
                         ids=[f"{f}={v!r}" for f, n in INTEGER_FIELDS.items() for v in spellings(n)])
def test_integers_written_as_numeric_strings_or_integral_numbers_are_accepted(field: str, value: Any) -> None:
    raw = with_integer(field, value)
    result = accepted(raw)
    got = integer_in(result.config, field)
    assert got == INTEGER_FIELDS[field] and type(got) is int
    assert result.raw == raw, "the stored config keeps what was submitted (GET .../config gives it back)"


def test_every_integer_of_the_protocol_is_converted() -> None:
    """No integer field escapes the conversion: each one a full config holds is in INTEGER_FIELDS."""
    config = accepted(config_dict(role_dict(taskNumber=2, minSucceededTaskCount=1, portList=[port_dict()]),
                                  retryCount=1)).config
    dumped = config.model_dump(mode="json", by_alias=True)
    found = {k for k, v in dumped.items() if type(v) is int}
    found |= {k for k, v in dumped["taskRoles"][0].items() if type(v) is int}
    found |= {k for k, v in dumped["taskRoles"][0]["portList"][0].items() if type(v) is int}
    assert found == set(INTEGER_FIELDS)


@pytest.mark.parametrize(("value", "expect"), [
    (-1, -1), (-2, -2), ("-1", -1), ("-2", -2), (-2.0, -2), (" -2 ", -2), (0, 0), ("0", 0), (1000, 1000),
    ("1e3", 1000),
])
def test_retry_count_from_minus_two_to_1000_is_accepted(value: Any, expect: int) -> None:
    assert accepted(config_dict(retryCount=value)).config.retry_count == expect


@pytest.mark.parametrize(("port", "begin_at", "port_number"), [
    ({"label": "ssh"}, 0, 1),
    ({"label": "http", "portNumber": 3}, 0, 3),
    ({"label": "fixed", "beginAt": 30000}, 30000, 1),
    ({"label": "both", "beginAt": "0", "portNumber": "1"}, 0, 1),
])
def test_port_list_items_default_begin_at_0_and_port_number_1(port: dict[str, Any], begin_at: int,
                                                               port_number: int) -> None:
    [spec] = accepted(config_dict(role_dict(portList=[port]))).config.task_roles[0].port_list
    assert (spec.label, spec.begin_at, spec.port_number) == (port["label"], begin_at, port_number)


def test_a_real_config_with_numbers_in_strings_is_accepted_and_stored_as_submitted() -> None:
    """As configs were written for OpenPAI's web form and scripts: every number a string, ports partly
    given, nulls for what is not wanted."""
    raw = json.loads("""{
      "jobName": "resnet50-train_v2.1",
      "image": "openpai/pai.example.tensorflow",
      "retryCount": "1",
      "taskRoles": [{
        "name": "worker",
        "taskNumber": "2", "cpuNumber": "4", "memoryMB": "8192", "shmMB": "64", "gpuNumber": "1",
        "portList": [{"label": "ssh", "beginAt": "0", "portNumber": "1"}, {"label": "tensorboard"}],
        "minFailedTaskCount": "1", "minSucceededTaskCount": null,
        "command": "python train.py --batch 32"
      }],
      "killAllOnCompletedTaskNumber": "0"
    }""")
    result = accepted(raw)
    role = result.config.task_roles[0]
    assert (role.task_number, role.cpu_number, role.memory_mb, role.shm_mb, role.gpu_number) == (2, 4, 8192, 64, 1)
    assert [(p.label, p.begin_at, p.port_number) for p in role.port_list] == [("ssh", 0, 1), ("tensorboard", 0, 1)]
    assert (role.min_failed_task_count, role.min_succeeded_task_count, result.config.retry_count) == (1, None, 1)
    assert result.raw == raw
    assert [w.split(":")[0] for w in result.warnings] == ["killAllOnCompletedTaskNumber"]
    assert "obsolete" in result.warnings[0]


@pytest.mark.parametrize("name", ["a~b", "~", "job~", "alice~job~0f0f0f0f"])
def test_job_names_with_a_tilde_are_refused_saying_why(name: str) -> None:
    [problem] = rejected(config_dict(jobName=name)).problems
    assert problem.path == "jobName" and "'~' separates" in problem.rule


NUMERIC_TEXT = st.from_regex(r"\A\s?[+-]?[0-9]{0,20}(\.[0-9]{0,20})?([eE][+-]?[0-9]{1,15})?\s?\Z")


@PROPERTY
@given(NUMERIC_TEXT | st.text(max_size=30) | st.floats() | st.integers())
def test_joi_integer_never_raises_and_gives_only_the_integer_spelled(value: Any) -> None:
    got = joi_integer(value)
    if type(got) is int and not isinstance(value, int):
        assert Decimal(str(value).strip()) == got and abs(got) <= MAX_SAFE_INTEGER
    else:
        assert got is value


def test_the_leniency_is_declared_on_the_models_fields() -> None:
    """Which fields take null (or "") as their default and which integers Joi converted is read from the
    models' own annotations, by the validator and the published schema alike."""
    assert default_keys(JobConfig) == {"authFile": False, "dataDir": False, "outputDir": False, "codeDir": False,
                                       "virtualCluster": True, "gpuType": False, "retryCount": False,
                                       "jobEnvs": False, "extras": False}
    # null has a meaning of its own for the min counts ("never a trigger"): not a default there
    assert default_keys(TaskRole) == dict.fromkeys(
        ("taskNumber", "cpuNumber", "memoryMB", "shmMB", "gpuNumber", "portList"), False)
    assert default_keys(PortSpec) == {}
    integers = {f.alias for model in (JobConfig, TaskRole, PortSpec) for f in model.model_fields.values()
                if JOI_INTEGER in f.metadata or any(JOI_INTEGER in getattr(a, "__metadata__", ())
                                                    for a in getattr(f.annotation, "__args__", ()))}
    assert integers == {"retryCount", "taskNumber", "cpuNumber", "memoryMB", "shmMB", "gpuNumber",
                        "minFailedTaskCount", "minSucceededTaskCount", "beginAt", "portNumber"}


def test_the_models_read_the_leniency_without_the_validator() -> None:
    role = TaskRole.model_validate({"name": "r", "command": "c", "taskNumber": " 3 ", "cpuNumber": None,
                                    "minFailedTaskCount": None, "portList": [{"label": "a", "beginAt": "2e3"}]})
    assert (role.task_number, role.cpu_number, role.min_failed_task_count) == (3, 1, None)
    assert role.port_list[0].begin_at == 2000
    config = JobConfig.model_validate({"jobName": "j", "image": "i", "virtualCluster": "", "retryCount": None,
                                       "taskRoles": [role.model_dump(by_alias=True)]})
    assert (config.virtual_cluster, config.retry_count) == ("default", 0)
    with pytest.raises(ValidationError, match="portNumber"):
        PortSpec.model_validate({"label": "a", "portNumber": None})  # a port's fields take no null

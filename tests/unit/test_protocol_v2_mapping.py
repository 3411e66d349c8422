"""A v2 job becomes the JobConfig paiq runs unchanged, field by field with OpenPAI's defaults; a JobConfig
reads back as a v2 document that, submitted again, is the same job; the v1 protocol does not see the
internal fields; secrets reach only the container's command."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.admission.v2.checks import validate_v2, validate_v2_body
from shared.admission.validation import Accepted, Rejected, validate_job_config
from shared.jobconfig.model import JobConfig
from shared.jobconfig.priority import PriorityClass, priority_class_of
from shared.jobconfig.v2.fromjob import to_v2_document
from shared.jobconfig.v2.render import MASK, masked, render_secrets
from tests.unit.factories import config_dict, role_dict

pytestmark = pytest.mark.unit
CORPUS = Path(__file__).parent / "protocol_v2_corpus"
# The v1 JSON Schema's module (services.submit.contract since the submit service's restructuring).
_SCHEMA_MODULES = ("services.submit.contract.configschema", "services.submit.configschema")


def job_config_schemas() -> dict[str, Any]:
    for name in _SCHEMA_MODULES:
        try:
            schemas: dict[str, Any] = importlib.import_module(name).job_config_schemas()
        except ModuleNotFoundError:
            continue
        return schemas
    raise AssertionError("no module makes the v1 JSON Schema")


ROUND_TRIPS = sorted(p.name for p in CORPUS.glob("*.yaml") if p.name.startswith(("marketplace-v2__", "examples__")))


def job(**roles_and_top: Any) -> dict[str, Any]:
    top = {k: v for k, v in roles_and_top.items() if k != "roles"}
    roles = roles_and_top.get("roles") or {"worker": role()}
    return {"protocolVersion": 2, "name": "j1", "type": "job",
            "prerequisites": [{"name": "img", "type": "dockerimage", "uri": "ubuntu:18.04"}],
            "taskRoles": roles, **top}


def role(**fields: Any) -> dict[str, Any]:
    return {"dockerImage": "img", "resourcePerInstance": {"cpu": 2, "memoryMB": 4096, "gpu": 1},
            "commands": ["echo hi"], **fields}


def accepted(document: dict[str, Any]) -> Accepted:
    result = validate_v2(document)
    assert isinstance(result, Accepted), getattr(result, "message", result)
    return result


def config_of(document: dict[str, Any]) -> JobConfig:
    return accepted(document).config


# --- v2 -> JobConfig, one field at a time --------------------------------------------------------------

@pytest.mark.parametrize(("document", "expect"), [
    (job(), {"job_name": "j1", "image": "ubuntu:18.04", "virtual_cluster": "default", "retry_count": 0}),
    (job(jobRetryCount=3, defaults={"virtualCluster": "vc1"}), {"retry_count": 3, "virtual_cluster": "vc1"}),
    (job(extras={"hivedScheduler": {"jobPriorityClass": "prod"}, "gangAllocation": False}),
     {"extras": {"hivedScheduler": {"jobPriorityClass": "prod"}, "gangAllocation": False}}),
    (job(parameters={"x": 1}), {"parameters": {"x": 1}}),
    (job(extras={"hivedScheduler": {"taskRoles": {"worker": {"skuType": "K80"}}}}), {"gpu_type": "K80"}),
])
def test_job_fields(document: dict[str, Any], expect: dict[str, Any]) -> None:
    config = config_of(document)
    for field, value in expect.items():
        assert getattr(config, field) == value, field


@pytest.mark.parametrize(("fields", "expect"), [
    ({}, {"task_number": 1, "cpu_number": 2, "memory_mb": 4096, "gpu_number": 1, "shm_mb": 512,
          "min_failed_task_count": 1, "min_succeeded_task_count": 1, "task_retry_count": None, "port_list": ()}),
    ({"instances": 4}, {"task_number": 4, "min_succeeded_task_count": 4}),
    ({"instances": 4, "completion": {"minFailedInstances": 2, "minSucceededInstances": 3}},
     {"min_failed_task_count": 2, "min_succeeded_task_count": 3}),
    ({"instances": 4, "completion": {"minFailedInstances": None, "minSucceededInstances": 0}},
     {"min_failed_task_count": 1, "min_succeeded_task_count": 4}),
    ({"instances": 2, "completion": {"minFailedInstances": -1, "minSucceededInstances": 5}},
     {"min_failed_task_count": None, "min_succeeded_task_count": None}),
    ({"taskRetryCount": 3}, {"task_retry_count": 3}),
    ({"extraContainerOptions": {"shmMB": 1024, "infiniband": True}}, {"shm_mb": 1024}),
    ({"resourcePerInstance": {"cpu": 1, "memoryMB": 256, "gpu": 0}}, {"shm_mb": 256, "memory_mb": 256}),
])
def test_role_fields(fields: dict[str, Any], expect: dict[str, Any]) -> None:
    config = config_of(job(roles={"worker": role(**fields)}))
    mapped = config.task_roles[0]
    assert mapped.name == "worker"
    for field, value in expect.items():
        assert getattr(mapped, field) == value, field


def test_ports_by_label() -> None:
    resources = {"cpu": 1, "memoryMB": 1024, "gpu": 0, "ports": {"ssh": 1, "tb": 2}}
    mapped = config_of(job(roles={"w": role(resourcePerInstance=resources)})).task_roles[0]
    assert [(p.label, p.begin_at, p.port_number) for p in mapped.ports] == [("ssh", 0, 1), ("tb", 0, 2),
                                                                           ("http", 0, 1)]


def test_a_different_image_and_registry_per_role() -> None:
    document = job(
        roles={"ps": role(), "worker": role(dockerImage="gpu")},
        secrets={"pw": "s3cr&t"},
        prerequisites=[{"name": "img", "type": "dockerimage", "uri": "ubuntu:18.04"},
                       {"name": "gpu", "type": "dockerimage", "uri": "registry.example.com:5000/team/cuda:11",
                        "auth": {"username": "u", "password": "<% $secrets.pw %>",
                                 "registryuri": "registry.example.com:5000"}}])
    config = config_of(document)
    ps, worker = config.task_roles
    assert (config.image, ps.image, worker.image) == ("ubuntu:18.04", "ubuntu:18.04",
                                                       "registry.example.com:5000/team/cuda:11")
    assert config.image_of(worker) == worker.image and ps.registry_auth is None and config.registry_auth is None
    assert worker.registry_auth is not None and worker.registry_auth.password == "s3cr&t"
    assert "s3cr&t" not in repr(config)


def test_the_priority_class_is_read_as_for_v1_jobs() -> None:
    config = config_of(job(extras={"hivedScheduler": {"jobPriorityClass": "oppo"}}))
    assert priority_class_of(config) is PriorityClass.OPPO


def test_the_default_deployment_wraps_the_commands() -> None:
    document = job(parameters={"n": 3}, roles={"worker": role(commands=["  train --n <% $parameters.n %>  "])},
                   deployments=[{"name": "d", "taskRoles": {"worker": {"preCommands": ["pip install x"],
                                                                          "postCommands": ["echo done"]}}}],
                   defaults={"deployment": "d"})
    assert config_of(document).task_roles[0].command == "pip install x\ntrain --n 3\necho done"


@pytest.mark.parametrize(("fields", "path"), [
    ({"resourcePerInstance": {"cpu": 0, "memoryMB": 1024, "gpu": 0}}, "taskRoles.worker.resourcePerInstance.cpu"),
    ({"resourcePerInstance": {"cpu": 1, "memoryMB": 50, "gpu": 0}}, "taskRoles.worker.resourcePerInstance.memoryMB"),
    ({"instances": 6000}, "taskRoles"),
    ({"extraContainerOptions": {"shmMB": 8192}}, "taskRoles.worker.extraContainerOptions.shmMB"),
    ({"completion": {"minFailedInstances": -3}}, "taskRoles.worker.completion.minFailedInstances"),
])
def test_paiqs_own_bounds_are_named_by_their_v2_path(fields: dict[str, Any], path: str) -> None:
    result = validate_v2(job(roles={"worker": role(**fields)}))
    assert isinstance(result, Rejected)
    assert path in {p.path for p in result.problems}, result.message


def test_an_image_paiq_cannot_pull_is_refused() -> None:
    document = job(prerequisites=[{"name": "img", "type": "dockerimage", "uri": "Not An Image"}])
    result = validate_v2(document)
    assert isinstance(result, Rejected) and "taskRoles.worker.dockerImage" in {p.path for p in result.problems}


def test_a_bad_virtual_cluster_is_named_where_v2_writes_it() -> None:
    result = validate_v2(job(defaults={"virtualCluster": "no such/vc"}))
    assert isinstance(result, Rejected) and {p.path for p in result.problems} == {"defaults.virtualCluster"}


# --- secrets ---------------------------------------------------------------------------------------------

def test_secrets_reach_only_the_containers_command() -> None:
    document = job(secrets={"token": "t0k&n", "list": ["a", "b"]},
                   roles={"w": role(commands=["login <% $secrets.token %> <% $secrets.list[1] %> <% $secrets.x %>"])})
    result = accepted(document)
    command = result.config.task_roles[0].command
    assert command == "login <% $secrets.token %> <% $secrets.list.1 %> <% $secrets.x %>"
    assert result.raw["secrets"] == MASK and "t0k&n" not in str(result.raw)
    assert render_secrets(command, result.config.secrets) == "login t0k&n b "  # no HTML escaping (see render.py)
    assert render_secrets(command, {}) == command  # no secrets: left as written, as OpenPAI's runtime did


def test_masking_is_structural() -> None:
    body = b'{"protocolVersion": 2, "name": "j", "type": "job", "secrets": {"pw": "hunter22"}, ' \
           b'"parameters": {"secrets": "kept"}, "prerequisites": [{"name": "i", "type": "dockerimage", "uri": "u"}], ' \
           b'"taskRoles": {"w": {"dockerImage": "i", "resourcePerInstance": {"cpu": 1, "memoryMB": 200, "gpu": 0}, ' \
           b'"commands": ["x"]}}}'
    result = validate_v2_body(body)
    assert isinstance(result, Accepted)
    assert result.raw["secrets"] == MASK and result.raw["parameters"] == {"secrets": "kept"}
    assert "hunter22" not in str(result.raw)
    assert masked({"a": 1}) == {"a": 1}


# --- the v1 protocol does not see the internal fields ----------------------------------------------------

@pytest.mark.parametrize("field", ["secrets", "parameters", "registryAuth"])
def test_internal_fields_are_unknown_to_a_v1_body(field: str) -> None:
    result = validate_job_config(config_dict(**{field: {"x": "y"}}))
    assert isinstance(result, Accepted)
    assert getattr(result.config, {"registryAuth": "registry_auth"}.get(field, field)) in ({}, None)
    assert any(w.startswith(f"{field}: unknown field") for w in result.warnings)


@pytest.mark.parametrize("field", ["image", "registryAuth", "taskRetryCount"])
def test_internal_role_fields_are_unknown_to_a_v1_body(field: str) -> None:
    result = validate_job_config(config_dict(role_dict(**{field: "registry/x:1" if field == "image" else 1})))
    assert isinstance(result, Accepted)
    assert result.config.task_roles[0].image == "" and result.config.task_roles[0].task_retry_count is None
    assert any(w.startswith(f"taskRoles[0].{field}: unknown field") for w in result.warnings)


def test_the_v1_schema_lists_no_internal_field() -> None:
    schemas = job_config_schemas()
    assert not {"secrets", "parameters", "registryAuth"} & set(schemas["JobConfig"]["properties"])
    assert not {"image", "registryAuth", "taskRetryCount"} & set(schemas["TaskRole"]["properties"])
    assert "RegistryAuth" not in str(schemas)


# --- JobConfig -> v2 -> JobConfig -------------------------------------------------------------------------

def _same_job(a: JobConfig, b: JobConfig, *also: str) -> None:
    left_out = {"parameters", "registry_auth", "secrets", *also}
    assert a.model_dump(exclude=left_out) == b.model_dump(exclude=left_out)


@pytest.mark.parametrize("name", ROUND_TRIPS)
def test_marketplace_and_examples_round_trip(name: str) -> None:
    first = validate_v2_body((CORPUS / name).read_bytes())
    assert isinstance(first, Accepted), first.message if isinstance(first, Rejected) else ""
    document = to_v2_document(first.config)
    again = validate_v2_body(yaml.safe_dump(document, sort_keys=False).encode())
    assert isinstance(again, Accepted), again.message if isinstance(again, Rejected) else ""
    _same_job(first.config, again.config)


def test_a_v1_job_read_back_as_v2_is_the_same_job() -> None:
    v1 = validate_job_config(config_dict(
        role_dict(name="ps", taskNumber=1, minFailedTaskCount=None),
        role_dict(name="worker", taskNumber=3, minSucceededTaskCount=2, shmMB=128, memoryMB=2048,
                  portList=[{"label": "tb", "beginAt": 0, "portNumber": 2}]),
        retryCount=2, virtualCluster="vc1", gpuType="K80", extras={"hivedScheduler": {"jobPriorityClass": "prod"}}))
    assert isinstance(v1, Accepted)
    document = to_v2_document(v1.config)
    assert document["prerequisites"] == [{"name": "docker_image_0", "type": "dockerimage", "uri": v1.config.image}]
    assert document["taskRoles"]["ps"]["completion"] == {"minFailedInstances": -1, "minSucceededInstances": -1}
    again = validate_v2(document)
    assert isinstance(again, Accepted), again.message if isinstance(again, Rejected) else ""
    _same_job(v1.config, again.config.model_copy(update={"task_roles": tuple(
        r.model_copy(update={"image": ""}) for r in again.config.task_roles)}), "extras")
    # gpuType is written per role as hived's skuType, and read back from there
    assert again.config.gpu_type == "K80" and again.config.extras["hivedScheduler"]["jobPriorityClass"] == "prod"


def test_job_envs_become_exports() -> None:
    v1 = validate_job_config(config_dict(role_dict(command="echo $A"), jobEnvs={"A": "x y", "B": True}))
    assert isinstance(v1, Accepted)
    command = to_v2_document(v1.config)["taskRoles"][v1.config.task_roles[0].name]["commands"]
    assert command == ["export A='x y'\nexport B=true\necho $A"]

"""Protocol v2 at submit against OpenPAI v1.8's own verdicts (tests/unit/protocol_v2_corpus/verdicts.json,
made by tests/oracle/openpai_v2 running OpenPAI's code): every document accepted or refused as OpenPAI
did, or listed below as a deliberate difference; the commands rendered as OpenPAI rendered them; the
registry credentials too; the stored config never holding a secret."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shared.admission.v2.checks import validate_v2_body
from shared.admission.validation import DEFAULT_LIMITS, Accepted, Rejected
from shared.jobconfig.v2.render import MASK
from shared.jobconfig.v2.yamlbody import load_yaml_body

pytestmark = pytest.mark.unit

CORPUS = Path(__file__).parent / "protocol_v2_corpus"
VERDICTS: dict[str, dict[str, Any]] = json.loads((CORPUS / "verdicts.json").read_text())["verdicts"]
DOCUMENTS = sorted(p.name for p in CORPUS.glob("*.yaml"))

# Documents OpenPAI v1.8 accepted and paiq refuses, deliberately (see shared/admission/v2/checks.py):
# document -> (the path paiq names, why).
DIFFERENCES: dict[str, tuple[str, str]] = {
    "paiq-edge__taskroles_list.yaml": ("taskRoles", "a job of no task roles never runs"),
    "paiq-edge__dockerimage_reference_constructor.yaml": (
        "taskRoles.worker.dockerImage", "JavaScript's `in` found Object.prototype.constructor; it names no image"),
    "paiq-edge__resource_zero_cpu.yaml": (
        "taskRoles.worker.resourcePerInstance.cpu", "a task needs a CPU and 100 MB (paiq's v1 bounds)"),
    "paiq-edge__resource_negative_gpu.yaml": ("taskRoles.worker.resourcePerInstance.gpu", "no task has -1 GPUs"),
    "paiq-edge__ports_count_zero.yaml": (
        "taskRoles.worker.resourcePerInstance.ports.web", "a label names at least one port (paiq's v1 bound)"),
}
# Documents OpenPAI refused with a 500 (its code crashed) that paiq refuses with a 400 naming the problem.
CRASHES = {"paiq-edge__taskroles_string.yaml": "taskRoles",
           "paiq-edge__secrets_auth_extra_number.yaml": "prerequisites[0].auth.email",
           "paiq-edge__render_unclosed_tag.yaml": "taskRoles.worker.commands",
           "paiq-edge__render_unopened_section.yaml": "taskRoles.worker.commands"}


def _judge(name: str) -> Accepted | Rejected:
    return validate_v2_body((CORPUS / name).read_bytes())


def test_the_corpus_is_whole() -> None:
    assert len(DOCUMENTS) == 193
    assert set(DOCUMENTS) == set(VERDICTS)
    assert set(DIFFERENCES) <= set(DOCUMENTS) and set(CRASHES) <= set(DOCUMENTS)


@pytest.mark.parametrize("name", DOCUMENTS)
def test_accepted_or_refused_as_openpai_did(name: str) -> None:
    verdict = VERDICTS[name]
    result = _judge(name)
    if name in DIFFERENCES:
        assert verdict["valid"], "a difference is a document OpenPAI accepted"
        assert isinstance(result, Rejected)
        assert DIFFERENCES[name][0] in {p.path for p in result.problems}, result.message
        return
    if verdict["valid"]:
        assert isinstance(result, Accepted), result.message if isinstance(result, Rejected) else ""
        return
    assert isinstance(result, Rejected), f"OpenPAI refused it at {verdict['stage']}: {verdict['errors']}"
    if name in CRASHES:
        assert verdict["http"]["status"] == 500
        assert CRASHES[name] in {p.path for p in result.problems}, result.message


@pytest.mark.parametrize("name", [n for n in DOCUMENTS if VERDICTS[n].get("stage") == "crosscheck"])
def test_cross_check_refusals_have_openpais_message(name: str) -> None:
    result = _judge(name)
    assert isinstance(result, Rejected)
    assert [p.rule for p in result.problems] == VERDICTS[name]["errors"]


@pytest.mark.parametrize("name", [n for n in DOCUMENTS if VERDICTS[n].get("stage") == "schema"])
def test_schema_refusals_name_the_path_openpai_named(name: str) -> None:
    """ajv's first error's path (``.taskRoles['worker'].commands``) is among paiq's problems (for a
    prerequisite matching none of the ``oneOf`` branches, the prerequisite's: paiq names the problem of
    the branch its ``type`` chose, ajv every branch's)."""
    errors = VERDICTS[name]["errors"]
    first = next((e for e in errors if e["keyword"] == "oneOf"), errors[0])
    data_path = first["dataPath"].replace("['", ".").replace("']", "").lstrip(".")
    if first["keyword"] in ("required",):
        data_path = f"{data_path}.{first['params']['missingProperty']}".lstrip(".")
    elif first["keyword"] == "additionalProperties":
        data_path = f"{data_path}.{first['params']['additionalProperty']}".lstrip(".")
    result = _judge(name)
    assert isinstance(result, Rejected)
    paths = {p.path for p in result.problems}
    assert any(p == (data_path or "(body)") or p.startswith(data_path) for p in paths), (data_path, result.message)


@pytest.mark.parametrize("name", [n for n in DOCUMENTS if VERDICTS[n]["valid"] and n not in DIFFERENCES])
def test_commands_and_registry_credentials_are_rendered_as_openpai_rendered_them(name: str) -> None:
    result = _judge(name)
    assert isinstance(result, Accepted)
    rendered = VERDICTS[name]["rendered"]
    assert {r.name: r.command for r in result.config.task_roles} == rendered["entrypoints"]
    document = load_yaml_body((CORPUS / name).read_bytes(), DEFAULT_LIMITS)
    images = {p["name"]: p for p in document.get("prerequisites", ()) if p.get("type") == "dockerimage"}
    roles = document["taskRoles"]
    for role in result.config.task_roles:
        wanted = rendered["dockerImageAuths"].get(roles[role.name]["dockerImage"])
        assert role.image == images[roles[role.name]["dockerImage"]]["uri"]
        if wanted is None:
            assert role.registry_auth is None
        else:
            assert role.registry_auth is not None
            got = role.registry_auth.model_dump(by_alias=True)
            assert got == {k: wanted[k] for k in ("username", "password", "registryuri") if k in wanted} | {
                k: "" for k in ("username", "password", "registryuri") if k not in wanted}


def _secret_values(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _secret_values(v)]
    if isinstance(value, list):
        return [s for v in value for s in _secret_values(v)]
    return [str(value)] if value is not None and len(str(value)) >= 4 else []


@pytest.mark.parametrize("name", [n for n in DOCUMENTS if "masked" in VERDICTS[n] and VERDICTS[n]["valid"]])
def test_the_stored_config_holds_no_secret(name: str) -> None:
    """OpenPAI's regex missed a quoted key and JSON text; paiq masks the parsed document."""
    result = _judge(name)
    assert isinstance(result, Accepted)
    document = load_yaml_body((CORPUS / name).read_bytes(), DEFAULT_LIMITS)
    stored = json.dumps(result.raw)
    if "secrets" in document:
        assert result.raw["secrets"] == MASK
        for secret in _secret_values(document["secrets"]):
            assert secret not in stored, (secret, name)
            assert secret not in repr(result.config)
    else:
        assert "secrets" not in result.raw
    # What paiq shows back is what OpenPAI's mask produced wherever that mask worked.
    masked_by_openpai = VERDICTS[name]["masked"]
    if '"******"' in masked_by_openpai and "secrets" in document:
        assert load_yaml_body(masked_by_openpai.encode(), DEFAULT_LIMITS)["secrets"] == MASK

"""The OpenAPI document describes exactly the routes the app serves, every status they answer with, and
a job config schema that says what the validator accepts: generated from the same models, checked here
against them (every field, every bound) and against the validator (at every bound, for every spelling
the schema lists, and for configs generated from the schema itself)."""

from __future__ import annotations

import re
import typing
from typing import Any, cast

import jsonschema
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from services.submit.app import create_app
from services.submit.contract.configschema import BOUNDED_BY, NO_NUL, integer_pattern
from services.submit.errors import STATUS_OF
from services.submit.openapi import document
from services.submit.routes.jobs import named_by_path
from shared.admission.validation import Accepted, Rejected, validate_job_config
from shared.jobconfig.lenient import protocol_fields
from shared.jobconfig.model import IMAGE_PATTERN, JobConfig, PortSpec, TaskRole
from tests.unit.factories import config_dict, role_dict

pytestmark = pytest.mark.unit

DOC = document()
SCHEMAS: dict[str, Any] = DOC["components"]["schemas"]
MODELS: dict[str, type[BaseModel]] = {"JobConfig": JobConfig, "TaskRole": TaskRole, "PortSpec": PortSpec}
# What the validator checks after the model: the image reference.
CHECKED_AFTER_THE_MODEL = {"image": {"pattern": IMAGE_PATTERN}}
# Refusals of a config the schema allows are for rules across fields, which JSON Schema cannot say (the
# schema's descriptions list them): the field refused, and words of the rule.
CROSS_FIELD = [
    (r"taskRoles\[\d+\]\.name", r"unique among task roles|must differ from taskRoles"),
    (r"taskRoles\[\d+\]\.shmMB", r"<= memoryMB"),
    (r"taskRoles\[\d+\]\.min(Failed|Succeeded)TaskCount", r"<= taskNumber"),
    (r"taskRoles\[\d+\]\.portList\[\d+\]\.label", r"unique within the role|differ from the role's other labels"),
    (r"taskRoles\[\d+\]\.portList\[\d+\]", r"also asked for by label|beginAt \+ portNumber - 1 must be <= 65535"),
    # and the limits on the whole body, or on sizes in bytes, which the schema's descriptions give
    (r"taskRoles", r"tasks in all"),
    (r"\(body\)", r"JSON values|levels deep|document in MongoDB could grow"),
    (r"(?s).*", r"^(key )?holds a lone surrogate|^(key|string) of [\d,]+ bytes"),
]


def test_every_route_is_documented_and_nothing_else() -> None:
    app = create_app(cast(Any, None))
    served = {(r.method.lower(), r.resource.canonical) for r in app.router.routes()
              if r.resource is not None and r.method != "HEAD"}
    documented = {(method, path) for path, ops in DOC["paths"].items() for method in ops}
    assert served == documented


def test_every_reference_resolves() -> None:
    for name in re.findall(r"#/components/schemas/(\w+)", repr(DOC)):
        assert name in SCHEMAS, name


def test_the_document_is_a_valid_openapi_3_1_document() -> None:
    schemathesis.openapi.from_dict(DOC).validate()


# Codes OpenPAI answered on some routes with a status other than their usual one (400 for an unknown user of
# GET /api/v1/user/{user}, an unknown VC of POST /api/v2/users, an unknown group of PUT /api/v2/groups).
OTHER_STATUS = {"NoUserError", "NoVirtualClusterError", "NoGroupError"}


def operations() -> list[tuple[str, str, dict[str, Any]]]:
    return [(method, path, op) for path, ops in DOC["paths"].items() for method, op in ops.items()]


@pytest.mark.parametrize(("method", "path", "op"), operations(), ids=[f"{m} {p}" for m, p, _ in operations()])
def test_every_status_a_route_can_answer_is_documented(method: str, path: str, op: dict[str, Any]) -> None:
    """What the shared parts of every handler answer: 401 where a token is needed, 400 and 413 where a body
    is read, 400 where a path names a user (its name is checked)."""
    statuses = set(op["responses"])
    if {"bearer": []} in op.get("security", []) and {} not in op["security"]:
        assert "401" in statuses
    if "requestBody" in op:
        assert {"400", "413"} <= statuses
    if "{user}" in path:
        assert "400" in statuses
    if path in ("/healthz", "/livez"):  # health reports, not errors: 503 carries the same report
        assert op["responses"]["503"] == op["responses"]["200"] | {"description": op["responses"]["503"]["description"]}
        return
    for status in statuses - {"200", "201", "202", "304"}:
        codes = op["responses"][status]["content"]["application/json"]["schema"]
        assert codes == {"$ref": "#/components/schemas/Error"} or set(codes["properties"]["code"]["enum"]) <= {
            c for c, s in STATUS_OF.items() if s == int(status)} | OTHER_STATUS, (status, codes)


# --- the job config's schema against the models ------------------------------------------------------


def constraints(info: FieldInfo) -> dict[str, Any]:
    """A field's bounds, length limits and pattern, wherever pydantic keeps them (``X | None`` included)."""
    found: dict[str, Any] = {}
    stack: list[Any] = [*info.metadata, info.annotation]
    while stack:
        item = stack.pop()
        for attr in ("ge", "le", "min_length", "max_length", "pattern"):
            if getattr(item, attr, None) is not None and not isinstance(item, type):
                found[attr] = getattr(item, attr)
        stack += list(getattr(item, "metadata", ()) or ())
        stack += list(getattr(item, "__metadata__", ()))
        stack += [a for a in typing.get_args(item) if a is not type(None)]
    return found


def integer_branch(prop: dict[str, Any]) -> dict[str, Any] | None:
    return next((b for b in prop.get("anyOf", ()) if b.get("type") == "integer"), None)


def value_branch(prop: dict[str, Any]) -> dict[str, Any]:
    """The branch of a property that holds its own constraints (not the null or '' one)."""
    for branch in prop.get("anyOf", ()):
        if branch.get("type") not in ("null", None) or "$ref" in branch or "anyOf" in branch:
            return cast(dict[str, Any], branch)
    return prop


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_field_is_in_the_schema_with_its_bounds(name: str) -> None:
    model, schema = MODELS[name], SCHEMAS[name]
    fields = protocol_fields(model)  # the internal ones (protocol v2's) are not the v1 schema's
    assert set(schema["required"]) == {f.alias or n for n, f in fields.items() if f.is_required()}
    for field_name, info in fields.items():
        alias = info.alias or field_name
        prop = schema["properties"][alias]
        limits = constraints(info)
        integer = integer_branch(prop)
        if integer is not None:
            assert integer["minimum"] == limits["ge"], alias
            implied = SCHEMAS[name]["properties"].get(BOUNDED_BY.get(alias, ""), {})
            assert integer["maximum"] == limits.get("le", (integer_branch(implied) or {}).get("maximum")), alias
            text = next(b for b in prop["anyOf"] if b.get("type") == "string")
            assert text["pattern"] == integer_pattern(integer["minimum"], integer["maximum"]), alias
            continue
        branch = value_branch(prop)
        if "string" in str(branch.get("type")):
            limits.setdefault("pattern", NO_NUL)  # free text: anything but NUL, as every string of a config
        limits |= CHECKED_AFTER_THE_MODEL.get(alias, {})
        for attr, keyword in (("pattern", "pattern"), ("max_length", "maxLength"), ("min_length", "minLength")):
            kind = branch.get("type")
            if attr != "pattern" and "array" in (kind if isinstance(kind, list) else [kind]):
                keyword = {"max_length": "maxItems", "min_length": "minItems"}[attr]
            assert branch.get(keyword) == limits.get(attr), (alias, attr)
    assert schema["additionalProperties"]["$ref"] == "#/components/schemas/JsonValue", "unknown fields are accepted"


# --- the job config's schema against the validator --------------------------------------------------


def place(model: str, field: str, value: Any) -> dict[str, Any]:
    """A config with ``value`` at ``field`` of the one role (its one port), the rest valid; a bounded field's
    bound set to its maximum (shmMB <= memoryMB)."""
    if model == "JobConfig":
        return config_dict(**{field: value})
    if model == "PortSpec":
        return config_dict(role_dict(portList=[{"label": "p", field: value}]))
    context = {}
    if field in BOUNDED_BY:
        bound = BOUNDED_BY[field]
        context[bound] = integer_branch(SCHEMAS["TaskRole"]["properties"][bound])["maximum"]  # type: ignore[index]
    return config_dict(role_dict(**{**context, field: value}))


def accepted(raw: dict[str, Any]) -> bool:
    result = validate_job_config(raw)
    assert isinstance(result, Accepted | Rejected)
    return isinstance(result, Accepted)


def documented(model: str, field: str, value: Any) -> bool:
    schema = {**SCHEMAS[model]["properties"][field], "components": DOC["components"]}
    return bool(jsonschema.Draft202012Validator(schema).is_valid(value))


def samples(prop: dict[str, Any]) -> list[Any]:
    """Values at a property's edges: each bound and one beyond, as numbers and as strings; lengths at the
    limit and one past; strings its pattern takes or not; null and ''."""
    out: list[Any] = [None, "", True, [], {}]
    integer = integer_branch(prop)
    if integer is not None:
        for n in (integer["minimum"] - 1, integer["minimum"], integer["maximum"], integer["maximum"] + 1):
            out += [n, str(n), float(n)]
        return [*out, 1.5, "1.5", "abc"]
    branch = value_branch(prop)
    if "maxLength" in branch:
        out += ["a" * branch["maxLength"], "a" * (branch["maxLength"] + 1)]
    # No string ends in "\n": Python's re (jsonschema's) lets "$" match before it, ECMA-262 does not.
    return [*out, "a", "A-_.9", "a~b", "a b", "a/b:c", "ü", "busybox:latest", "localhost:5000/a/b", "B/c", "a\x00b"]


# Known differences, each a refusal the validator owes (the document says what it should accept): none.
VALIDATOR_OWES: dict[tuple[str, str], str] = {}
FIELDS = [pytest.param(m, f, id=f"{m}.{f}", marks=[pytest.mark.xfail(reason=VALIDATOR_OWES[m, f], strict=True)]
                       if (m, f) in VALIDATOR_OWES else [])
          for m in MODELS for f in SCHEMAS[m]["properties"] if f not in ("taskRoles", "portList")]


@pytest.mark.parametrize(("model", "field"), FIELDS)
def test_the_validator_accepts_exactly_what_the_schema_says_at_each_edge(model: str, field: str) -> None:
    for value in samples(SCHEMAS[model]["properties"][field]):
        raw = place(model, field, value)
        assert accepted(raw) == documented(model, field, value), (field, value, validate_job_config(raw))


@pytest.mark.parametrize(("where", "key"), [(w, k) for w in ("jobEnvs", "extras")
                                            for k in ("A_1", "a.b", "a-b", "ü", "", "x" * 300, "$x", "a\x00")])
def test_free_map_keys_are_accepted_exactly_as_documented(where: str, key: str) -> None:
    value = {key: "v"}
    assert accepted(config_dict(**{where: value})) == documented("JobConfig", where, value), key


@pytest.mark.parametrize("value", ["s", "s\x00", 1, 2**63, -1.5, True, None, [], {}])
def test_job_env_values_are_accepted_exactly_as_documented(value: Any) -> None:
    envs = {"A": value}
    assert accepted(config_dict(jobEnvs=envs)) == documented("JobConfig", "jobEnvs", envs), value


@pytest.mark.parametrize("field", ["jobName", "image", "taskRoles"])
def test_required_fields_are_refused_when_missing_or_null(field: str) -> None:
    raw = config_dict()
    assert not accepted({k: v for k, v in raw.items() if k != field})
    assert not accepted({**raw, field: None})


def test_unknown_fields_are_accepted_everywhere_as_documented() -> None:
    raw = config_dict(role_dict(portList=[{"label": "p", "colour": 1}], storageGB=5), tmp={"a": [1]})
    result = validate_job_config(raw)
    assert isinstance(result, Accepted) and len(result.warnings) == 3
    assert all(SCHEMAS[m]["additionalProperties"]["$ref"].endswith("/JsonValue") for m in MODELS)


@pytest.mark.parametrize("value", ["a", "a\x00b", 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 1.5, None, True,
                                   [1, [2, {"k": "v"}]], {"k\x00": 1}, {"k": [2**64]}])
@pytest.mark.parametrize("where", ["JobConfig", "TaskRole", "PortSpec", "extras"])
def test_unknown_fields_and_extras_hold_what_json_value_says(where: str, value: Any) -> None:
    """Values paiq keeps as they came: no NUL in a key or string, integers MongoDB can store."""
    raw = {"JobConfig": config_dict(unknown=value), "TaskRole": config_dict(role_dict(unknown=value)),
           "PortSpec": config_dict(role_dict(portList=[{"label": "p", "unknown": value}])),
           "extras": config_dict(extras={"k": value})}[where]
    schema = {"$ref": "#/components/schemas/JsonValue", "components": DOC["components"]}
    assert accepted(raw) == jsonschema.Draft202012Validator(schema).is_valid(value), value


@pytest.mark.parametrize("hived", [{"jobPriorityClass": "prod", "other": [1]}, {"k\x00": 1}, {"k": {"j\x00": 1}},
                                   {"k": "a\x00"}, {"jobPriorityClass": "top"}])
def test_the_hived_options_the_schema_allows_are_those_the_validator_takes(hived: dict[str, Any]) -> None:
    """A NUL in a key of extras.hivedScheduler was allowed by the schema and refused by the validator (a
    generated config found it)."""
    raw = config_dict(extras={"hivedScheduler": hived})
    schema = {"$ref": "#/components/schemas/JobConfig", "components": DOC["components"]}
    assert accepted(raw) == jsonschema.Draft202012Validator(schema).is_valid(raw), hived


def test_a_put_body_may_name_any_job_as_the_path_names_it() -> None:
    assert SCHEMAS["JobConfigNamedByPath"]["properties"]["jobName"] == {
        "type": "string", "pattern": NO_NUL, "description": "required; the path's name is used"}
    renamed, warning = named_by_path(config_dict(jobName="not a~name"), "job1")
    assert accepted(renamed) and warning


def cross_field(path: str, rule: str) -> bool:
    return any(re.fullmatch(p, path) and re.search(r, rule) for p, r in CROSS_FIELD)


# No shrinking: a generated config is large, and the first failing one already names the rule refused.
@settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.generate])
@given(schemathesis.openapi.from_dict(DOC)["/api/v1/user/{user}/jobs"]["POST"].as_strategy())
def test_configs_generated_from_the_schema_are_accepted_but_for_rules_across_fields(case: Any) -> None:
    """What generated clients and fuzzers learn from the schema holds: a config it allows is refused only
    for a rule that JSON Schema cannot say, which its descriptions name."""
    result = validate_job_config(case.body)
    if isinstance(result, Rejected):
        assert all(cross_field(p.path, p.rule) for p in result.problems), result.message

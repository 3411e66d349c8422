"""The job config's JSON Schema for the OpenAPI document, generated from the models that validate it.

:mod:`shared.jobconfig.model`'s pydantic models give every field, its type, bounds, pattern, default and
whether it is required (``model_json_schema``). What OpenPAI's Joi schema accepted beyond the plain types
is declared on those fields (:mod:`shared.jobconfig.lenient`) and written here as JSON Schema says it:

- every integer (:data:`~shared.jobconfig.lenient.JOI_INTEGER`) may also be written as a string of its decimal
  digits (``"2"``; Joi also took ``" 2 "``, ``"2.0"`` and ``"1e3"``, which the validator accepts and this
  schema does not list);
- an optional field where null means the default (:func:`~shared.jobconfig.lenient.default_keys`) may be
  ``null`` (``virtualCluster`` also ``""``); ``minFailedTaskCount`` and ``minSucceededTaskCount`` are
  nullable in the model itself, where null means "never a trigger";
- unknown fields are accepted with a warning (kept in the stored config), so every object stays open
  (``additionalProperties`` true) while the known fields are exact;
- the checks the validator makes after the model: the image reference, the keys of ``jobEnvs`` and
  ``extras``, ``jobEnvs`` values, and the obsolete ``killAllOnCompletedTaskNumber`` (an integer, ignored);
- what it checks of every key and value, known or not (:mod:`shared.jobconfig.limits`), as far as JSON Schema
  says it: no NUL character, integers within 64 bits (``JsonValue``, the values of unknown fields).

What JSON Schema cannot say stays in the descriptions: role names unique, ``shmMB`` <= ``memoryMB``,
the min counts <= ``taskNumber``, port labels unique in a role, fixed port ranges within 65535 and not
overlapping, the tasks of all roles together, the body's size, depth and number of values, sizes in
bytes of UTF-8, every task's environment within its limit, ``authFile`` and ``codeDir`` inside the
default file system, ``PAI_SSH_PUB_KEY`` holding OpenSSH public keys. Where one of them bounds a field
(``shmMB`` <= ``memoryMB`` <= its maximum), that bound is in the schema too.
tests/unit/test_openapi_routes.py checks this schema against the models and against the validator.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from shared.admission.validation import MAX_CONFIG_BYTES, MAX_SAFE_INTEGER
from shared.jobconfig.lenient import OBSOLETE_FIELDS, default_keys, protocol_fields
from shared.jobconfig.limits import INT64, JobLimits
from shared.jobconfig.model import (
    EXTRAS_KEY_PATTERN,
    IMAGE_PATTERN,
    JOB_ENV_KEY_PATTERN,
    JobConfig,
    PortSpec,
    TaskRole,
)
from shared.jobconfig.priority import DEFAULT_CLASS, PriorityClass

REF = "#/components/schemas/{model}"
# Maxima the model leaves open but a rule across fields closes: field -> the field it may not exceed.
BOUNDED_BY = {"shmMB": "memoryMB", "minFailedTaskCount": "taskNumber", "minSucceededTaskCount": "taskNumber"}
LIMITS = JobLimits()  # the defaults; each is a setting (PAIQ_MAX_...), see the docs
# No NUL character in any key or string (MongoDB cannot store one in a key, nor Linux pass one to a task).
NO_NUL = r"^[^\u0000]*$"
INTEGER_64 = {"minimum": -INT64, "maximum": INT64 - 1}
JSON_VALUE: dict[str, Any] = {
    "description": ("any JSON value paiq can store: no NUL character in a key or string, integers within 64 "
                    f"bits, keys of at most {LIMITS.max_key_bytes:,} and strings of at most "
                    f"{LIMITS.max_string_bytes:,} bytes of UTF-8"),
    "anyOf": [{"type": "string", "pattern": NO_NUL}, {"type": "number", **INTEGER_64},
              {"type": ["boolean", "null"]}, {"type": "array", "items": {"$ref": REF.format(model="JsonValue")}},
              {"type": "object", "propertyNames": {"pattern": NO_NUL},
               "additionalProperties": {"$ref": REF.format(model="JsonValue")}}]}
# The validator matches jobEnvs keys with re.ASCII; ECMA-262's \w is ASCII already, Python tools' is not.
ECMA_JOB_ENV_KEY_PATTERN = JOB_ENV_KEY_PATTERN.replace(r"\w", "[A-Za-z0-9_]")

_DESCRIPTIONS = {
    JobConfig: ("The OpenPAI v1 job config (see docs: The job protocol). Unknown fields are accepted with a "
                "warning and kept in the stored config. Refused (400) beyond this schema, with the defaults of "
                f"the settings named: a body over {MAX_CONFIG_BYTES:,} bytes, of more than "
                f"{LIMITS.max_json_values:,} JSON values (PAIQ_MAX_JSON_VALUES) or nested more than "
                f"{LIMITS.max_json_depth} levels deep (PAIQ_MAX_JSON_DEPTH); a key over {LIMITS.max_key_bytes:,} "
                f"bytes of UTF-8 (PAIQ_MAX_KEY_BYTES) or a string over {LIMITS.max_string_bytes:,} bytes "
                f"(PAIQ_MAX_STRING_BYTES); more than {LIMITS.max_job_tasks:,} tasks in all roles together "
                f"(PAIQ_MAX_JOB_TASKS); a job whose stored document could pass {LIMITS.max_document_bytes:,} "
                "bytes (PAIQ_MAX_JOB_DOCUMENT_BYTES); task role names that repeat or that become "
                "the same once '.' and '~' are '_', a task environment over its size limit (every task sees "
                "every task's hosts and ports), authFile or codeDir outside the default file system, a "
                "PAI_SSH_PUB_KEY in jobEnvs that is not OpenSSH public keys (one a line)."),
    TaskRole: ("A task role. Refused (400) beyond this schema: shmMB over memoryMB, minFailedTaskCount or "
               "minSucceededTaskCount over taskNumber, port labels that repeat in the role (also once '.' and "
               "'~' are '_'), fixed port ranges that overlap."),
    PortSpec: ("Ports each task of the role gets under one label: portNumber ports from beginAt (0: the "
               "platform picks them). beginAt + portNumber - 1 must be <= 65535."),
}
_FIELD_DESCRIPTIONS = {
    "jobName": "the job's name, unique among the user's jobs (no '~')",
    "image": "a Docker image reference: [registry[:port]/]path[:tag][@digest], path components lowercase",
    "retryCount": "attempts after a failed one; -1: retry failures without limit, -2: start again after "
                  "every completion (until stopped)",
    "minFailedTaskCount": "failed tasks of the role that fail the job; null: no number of them does",
    "minSucceededTaskCount": "succeeded tasks of the role that make the job succeed; null: the job succeeds "
                             "once all its tasks have ended (unless failures failed it)",
    "jobEnvs": "environment variables of every task (strings, numbers or booleans)",
    "extras": "free-form data kept with the job",
}


def integer_pattern(lo: int, hi: int) -> str:
    """A regular expression (ECMA-262 and Python alike) that matches exactly the decimal spellings of the
    integers ``lo..hi``: no sign for non-negative ones, no leading zeros."""
    if lo > hi:
        raise ValueError(f"empty range {lo}..{hi}")
    alternatives = []
    if lo < 0:
        alternatives += [f"-{a}" for a in _natural_alternatives(max(1, -hi), -lo)]
    if hi >= 0:
        alternatives += _natural_alternatives(max(0, lo), hi)
    return f"^(?:{'|'.join(alternatives)})$"


def _natural_alternatives(lo: int, hi: int) -> list[str]:
    """Alternatives matching ``lo..hi`` (0 <= lo <= hi), one per run that shares a prefix."""
    out, start = [], lo
    for stop in _stops(lo, hi):
        out.append(_run_pattern(str(start), str(stop)))
        start = stop + 1
    return out


def _stops(lo: int, hi: int) -> list[int]:
    """Where ``lo..hi`` splits into runs like 120-129, 130-199, 200-999: each a prefix then digit ranges."""
    stops = {hi}
    digits = len(str(lo))
    for k in range(1, 20):
        nines = int(str(lo)[:-k] + "9" * k) if k < digits else 10**k - 1
        if lo <= nines < hi:
            stops.add(nines)
        zeros = (hi + 1) - (hi + 1) % 10**k - 1
        if lo < zeros <= hi:
            stops.add(zeros)
    return sorted(stops)


def _run_pattern(start: str, stop: str) -> str:
    """``start``..``stop`` of one run: equal lengths, a shared prefix, then one range and any digits."""
    if len(start) != len(stop):  # 0-9 then 10-99 and so on: the splits above never mix lengths otherwise
        raise ValueError(f"{start}..{stop} is not one run")
    pattern, free = "", 0
    for a, b in zip(start, stop, strict=True):
        if a == b:
            pattern += a
        elif (a, b) == ("0", "9"):
            free += 1
        else:
            pattern += f"[{a}-{b}]"
    if free:
        pattern += "[0-9]" + (f"{{{free}}}" if free > 1 else "")
    return pattern


def _lenient_integer(prop: dict[str, Any], lo: int, hi: int, nullable: bool) -> dict[str, Any]:
    extra = {k: v for k, v in prop.items() if k not in {"type", "minimum", "maximum", "anyOf"}}
    branches: list[dict[str, Any]] = [
        {"type": "integer", "minimum": lo, "maximum": hi},
        {"type": "string", "pattern": integer_pattern(lo, hi), "description": "the integer in decimal digits"},
    ]
    if nullable:
        branches.append({"type": "null"})
    return {"anyOf": branches, **extra}


def _bounds(prop: dict[str, Any]) -> tuple[int, int | None] | None:
    """(minimum, maximum) of an integer property, or None when it is not one (a nullable one included)."""
    for branch in (prop, *prop.get("anyOf", ())):
        if branch.get("type") == "integer":
            return int(branch.get("minimum", -MAX_SAFE_INTEGER)), branch.get("maximum")
    return None


def _nullable(prop: dict[str, Any]) -> dict[str, Any]:
    if isinstance(prop.get("type"), str):
        return {**prop, "type": [prop["type"], "null"]}
    if "$ref" in prop or "anyOf" in prop:
        return {"anyOf": [{k: v for k, v in prop.items() if k in {"$ref", "anyOf"}}, {"type": "null"}],
                **{k: v for k, v in prop.items() if k not in {"$ref", "anyOf"}}}
    return prop


def _maximum(props: dict[str, Any], name: str) -> int | None:
    bounds = _bounds(props[name])
    if bounds is None or bounds[1] is None:
        return None
    return int(bounds[1])


def _object(model: type[BaseModel], schema: dict[str, Any]) -> dict[str, Any]:
    """One model's schema as the validator reads it (see the module's docstring)."""
    # The model's internal fields (another protocol's) are not the v1 protocol's: left out.
    known = {f.alias or n for n, f in protocol_fields(model).items()}
    props: dict[str, Any] = {k: v for k, v in schema["properties"].items() if k in known}
    required = set(schema.get("required", ())) & known
    out: dict[str, Any] = {}
    defaults = default_keys(model)
    for name, prop in props.items():
        prop = {k: v for k, v in prop.items() if k != "title"}
        if name in _FIELD_DESCRIPTIONS:
            prop["description"] = _FIELD_DESCRIPTIONS[name]
        optional_null = name in defaults
        bounds = _bounds(prop)
        if bounds is not None:
            hi = bounds[1] if bounds[1] is not None else (
                _maximum(props, BOUNDED_BY[name]) if name in BOUNDED_BY else None)
            nullable = optional_null or any(b.get("type") == "null" for b in prop.get("anyOf", ()))
            prop = _lenient_integer(prop, bounds[0], int(hi) if hi is not None else MAX_SAFE_INTEGER, nullable)
        elif optional_null:
            prop = _nullable(prop)
        if _is_free_text(prop):
            prop["pattern"] = NO_NUL
        if defaults.get(name):
            prop = {"anyOf": [{k: v for k, v in prop.items() if k != "default"}, {"const": ""}],
                    "default": prop.get("default"), "description": "'' or null: the default"}
        out[name] = prop
    return {"type": "object", "description": _DESCRIPTIONS[model], "required": sorted(required),
            "properties": out, "propertyNames": {"pattern": NO_NUL},
            "additionalProperties": {"$ref": REF.format(model="JsonValue"),
                                     "description": "an unknown field: accepted with a warning"}}


def _is_free_text(prop: dict[str, Any]) -> bool:
    kind = prop.get("type")
    return "string" in (kind if isinstance(kind, list) else [kind]) and "pattern" not in prop


def job_config_schemas() -> dict[str, dict[str, Any]]:
    """``JobConfig``, ``TaskRole``, ``PortSpec`` and ``JsonValue`` as OpenAPI components (referring to one
    another)."""
    generated = JobConfig.model_json_schema(by_alias=True, ref_template=REF, mode="validation")
    defs = generated.pop("$defs")
    schemas = {"JobConfig": _object(JobConfig, generated), "TaskRole": _object(TaskRole, defs["TaskRole"]),
               "PortSpec": _object(PortSpec, defs["PortSpec"]), "JsonValue": JSON_VALUE}
    top = schemas["JobConfig"]["properties"]
    top["image"]["pattern"] = IMAGE_PATTERN
    top["jobEnvs"]["propertyNames"] = {"pattern": ECMA_JOB_ENV_KEY_PATTERN}
    top["jobEnvs"]["additionalProperties"] = {"anyOf": [{"type": "string", "pattern": NO_NUL},
                                                        {"type": "number", **INTEGER_64}, {"type": "boolean"}]}
    top["extras"]["propertyNames"] = {"pattern": EXTRAS_KEY_PATTERN}
    top["extras"]["additionalProperties"] = {"$ref": REF.format(model="JsonValue")}
    top["extras"]["properties"] = {"hivedScheduler": {
        "anyOf": [{"type": "null"}, {
            "type": "object", "propertyNames": {"pattern": NO_NUL},
            "additionalProperties": {"$ref": REF.format(model="JsonValue")},
            "properties": {"jobPriorityClass": {
                "anyOf": [{"type": "null"}, {"type": "string", "enum": [c.value for c in PriorityClass]}],
                "description": "OpenPAI's (HiveD's) priority class: " + ", ".join(
                    f"{c.value} {c.number}" for c in PriorityClass) + f"; absent: {DEFAULT_CLASS.value}. "
                    "crit is for administrators."}}}],
        "description": "OpenPAI's HiveD options; paiq reads jobPriorityClass"}}
    for name, instead in OBSOLETE_FIELDS.items():
        top[name] = {**_lenient_integer({}, -MAX_SAFE_INTEGER, MAX_SAFE_INTEGER, nullable=False),
                     "deprecated": True, "description": f"obsolete, ignored with a warning: {instead}"}
    return schemas


def named_by_path(config: dict[str, Any]) -> dict[str, Any]:
    """The body of ``PUT .../jobs/{job}``: as a config, but ``jobName`` may be any string, as the path's
    name replaces it (OpenPAI did so; paiq warns)."""
    schema = copy.deepcopy(config)
    schema["properties"]["jobName"] = {"type": "string", "pattern": NO_NUL,
                                       "description": "required; the path's name is used"}
    schema["description"] = "A job config whose name is the path's (see JobConfig)."
    return schema

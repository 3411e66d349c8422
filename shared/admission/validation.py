"""Pure validation of a submitted job config: raw JSON in, an accepted config or named problems out.

Every refusal names the JSON path and the rule. Nothing here raises for bad input: the result is a
value (``Accepted`` or ``Rejected``), so callers map it to an answer in one place.

What is accepted follows OpenPAI v0.14's Joi schema (rest-server src/config/job.js): its integers were
``Joi.number().integer()`` with Joi's default conversion, so ``"2"``, ``" 2 "``, ``"2.0"``, ``"1e3"`` and
``2.0`` are the integers they spell; ``"1.5"``, ``"abc"``, ``""`` and booleans are not. The models declare
that leniency on their fields (:mod:`shared.jobconfig.lenient`), and paiq stores the config as submitted.
Where paiq is stricter than that schema the rule says why.

The steps, each a function, so that another protocol (v2's YAML) maps onto the same :class:`JobConfig`
and the same checks: the limits on the raw body (:func:`limit_problems`), the protocol's own leniency
(:func:`_clean`: unknown and obsolete fields), the models, then the rules across fields that a model
cannot say (:func:`config_problems`).

Before any of that, the body is held to the limits of :mod:`shared.jobconfig.limits` (its values counted from
its bytes, then one linear walk of the decoded JSON: depth, keys, strings, text MongoDB and the engine
cannot hold, tasks, roles, the job document's size): nothing that grows with a body is built for one
that fails them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from shared.admission.docsize import declared_ports, job_document_bytes, role_shapes
from shared.jobconfig.lenient import MAX_SAFE_INTEGER as MAX_SAFE_INTEGER
from shared.jobconfig.lenient import OBSOLETE_FIELDS, protocol_fields
from shared.jobconfig.lenient import joi_integer as joi_integer
from shared.jobconfig.limits import JobLimits, count_values, nesting_depth, printable, setting, walk
from shared.jobconfig.model import (
    EXTRAS_KEY_PATTERN,
    IMAGE_PATTERN,
    JOB_ENV_KEY_PATTERN,
    JobConfig,
    PortSpec,
    TaskRole,
    env_name,
)
from shared.jobconfig.notifykinds import check_switch
from shared.jobconfig.priority import check_priority_class
from shared.jobconfig.problems import ConfigProblem as ConfigProblem
from shared.jobconfig.problems import json_type, problems_from, shown

MAX_CONFIG_BYTES = 1024 * 1024
DEFAULT_LIMITS = JobLimits()
MAX_WARNINGS = 20  # warnings about unknown fields listed in one answer; the rest are counted

# The v1 protocol's fields: the models' internal ones (shared.jobconfig.lenient.Internal) are unknown to it.
_TOP_FIELDS = {f.alias or n for n, f in protocol_fields(JobConfig).items()}
_ROLE_FIELDS = {f.alias or n for n, f in protocol_fields(TaskRole).items()}
_PORT_FIELDS = {f.alias or n for n, f in protocol_fields(PortSpec).items()}


class Rejected(BaseModel):
    model_config = ConfigDict(frozen=True)
    problems: tuple[ConfigProblem, ...]

    @property
    def message(self) -> str:
        return "; ".join(str(p) for p in self.problems)


class Accepted(BaseModel):
    model_config = ConfigDict(frozen=True)
    config: JobConfig
    # The config as submitted, unknown fields and all: what GET .../config gives back.
    raw: dict[str, Any]
    warnings: tuple[str, ...] = ()


def _reject(path: str, rule: str) -> Rejected:
    return Rejected(problems=(ConfigProblem(path=path, rule=rule),))


def parse_job_json(body: bytes | str, limits: JobLimits = DEFAULT_LIMITS) -> dict[str, Any] | Rejected:
    """Decode a request body into a JSON object, refusing what is too large or not an object.

    Its values are counted from the bytes first (:func:`shared.jobconfig.limits.count_values`, linear): a body of
    more values than allowed never becomes Python objects.
    """
    data_bytes = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    size = len(data_bytes)
    if size > MAX_CONFIG_BYTES:
        return _reject("(body)", f"must be at most {MAX_CONFIG_BYTES} bytes, got {size}")
    if size == 0:
        return _reject("(body)", "must be a JSON object, got an empty body")
    values = count_values(data_bytes, at_most=limits.max_json_values)
    if values > limits.max_json_values:
        return _too_many_values(data_bytes, values, limits)
    try:
        data = json.loads(body, parse_constant=no_json_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return _reject("(body)", f"is not valid JSON ({e})")
    except RecursionError:
        return _reject("(body)", _too_deep(nesting_depth(data_bytes), limits))
    except ValueError as e:  # e.g. an integer literal of thousands of digits
        return _reject("(body)", f"is not acceptable JSON ({e})")
    if not isinstance(data, dict):
        return _reject("(body)", f"must be a JSON object, got {json_type(data)}")
    return data


def _too_deep(depth: int, limits: JobLimits) -> str:
    return (f"nests objects and lists {depth:,} levels deep; paiq accepts at most {limits.max_json_depth} levels "
            f"({setting('max_json_depth')})")


def _too_many_values(body: bytes, values: int, limits: JobLimits) -> Rejected:
    """A body of too many values; its depth too when that is also past the limit and cheap to tell (a body
    nested 10,000 levels is 10,000 values)."""
    problems = [ConfigProblem(path="(body)", rule=(
        f"holds {values:,} JSON values; paiq accepts at most {limits.max_json_values:,} in a job "
        f"({setting('max_json_values')})"))]
    if body.count(b"[") + body.count(b"{") <= 4 * limits.max_json_values:
        depth = nesting_depth(body)
        if depth > limits.max_json_depth:
            problems.insert(0, ConfigProblem(path="(body)", rule=_too_deep(depth, limits)))
    return Rejected(problems=tuple(problems))


def no_json_constant(name: str) -> object:
    """``json.loads``'s ``parse_constant``: NaN and Infinity are not JSON numbers (Python accepts them)."""
    raise ValueError(f"{name} is not a JSON number")


def validate_job_config(raw: Mapping[str, Any], limits: JobLimits = DEFAULT_LIMITS) -> Accepted | Rejected:
    """Validate a decoded job config; see the docs (The job protocol) for the rules and defaults.

    The limits (:class:`~shared.jobconfig.limits.JobLimits`) are checked first, on the raw JSON: a body that
    passes one is refused with those problems alone, before any model is built from it.
    """
    if not isinstance(raw, Mapping):
        return _reject("(body)", f"must be a JSON object, got {json_type(raw)}")
    limited = limit_problems(raw, limits)
    if limited:
        return Rejected(problems=tuple(limited))
    warnings: list[str] = []
    problems: list[ConfigProblem] = []
    cleaned = _clean(raw, warnings, problems)
    problems.extend(_check_free_maps(cleaned))
    try:
        config = JobConfig.model_validate(cleaned)
    except ValidationError as e:
        problems.extend(problems_from(e))
        # Still report the cross-field rules of every role that is valid on its own, so one answer
        # lists everything to fix.
        problems.extend(_cross_field_problems(_roles_valid_alone(cleaned.get("taskRoles"))))
        return Rejected(problems=tuple(_dedupe(problems)))
    problems.extend(config_problems(config))
    if problems:
        return Rejected(problems=tuple(_dedupe(problems)))
    return Accepted(config=config, raw=dict(raw), warnings=_capped(warnings))


def config_problems(config: JobConfig) -> list[ConfigProblem]:
    """What a config that its models accept may still break: the rules across fields and the image."""
    problems = _cross_field_problems(list(config.task_roles))
    if not re.fullmatch(IMAGE_PATTERN, config.image):
        problems.append(ConfigProblem(path="image", rule=(
            f"must be a Docker image reference like registry:5000/team/name:tag (lowercase name, optional "
            f"tag and digest), got {config.image!r}")))
    problems.extend(check_switch(config.extras))  # extras.jobStatusChangeNotification, in both protocols
    return problems


TASKS_WHY = ("every task's environment lists every task's host and ports, and Linux starts a task only if "
             "its environment fits: about 4,400 tasks with the default ports (OpenPAI's launcher allowed "
             "50,000 a role)")


def limit_problems(raw: Mapping[str, Any], limits: JobLimits = DEFAULT_LIMITS) -> list[ConfigProblem]:
    """What the raw body asks beyond :class:`~shared.jobconfig.limits.JobLimits`, in O(size of the body): its
    keys and values, depth and number of values, task roles and tasks, and the size its job document
    in MongoDB could grow to."""
    figures = walk(raw, limits)
    problems = list(figures.problems)
    roles = raw.get("taskRoles")
    shapes = role_shapes(roles)
    if isinstance(roles, list) and len(roles) > limits.max_task_roles:
        problems.append(ConfigProblem(path="taskRoles", rule=(
            f"the job has {len(roles):,} task roles; paiq runs at most {limits.max_task_roles:,} task roles per "
            f"job ({setting('max_task_roles')})")))
    tasks = sum(s.tasks for s in shapes)
    if tasks > limits.max_job_tasks:
        problems.append(ConfigProblem(path="taskRoles", rule=(
            f"the job has {tasks:,} tasks in all; paiq runs at most {limits.max_job_tasks:,} tasks per job "
            f"({setting('max_job_tasks')}): {TASKS_WHY}")))
    if problems:
        return problems
    size = job_document_bytes(figures.bson_bytes, shapes, declared_ports(roles))
    if size.total > limits.max_document_bytes:
        problems.append(ConfigProblem(path="(body)", rule=(
            f"the job's document in MongoDB could grow to {size.total:,} bytes (the config as submitted "
            f"{size.raw:,}, as validated up to {size.config:,}, {tasks:,} task records {size.tasks:,}); paiq "
            f"stores at most {limits.max_document_bytes:,} bytes a job ({setting('max_document_bytes')}; "
            f"MongoDB's limit is 16 MiB a document)")))
    return problems


def _capped(warnings: list[str]) -> tuple[str, ...]:
    if len(warnings) <= MAX_WARNINGS:
        return tuple(warnings)
    return (*warnings[:MAX_WARNINGS],
            f"and {len(warnings) - MAX_WARNINGS:,} more unknown fields, ignored (kept in the stored config)")


def _clean(raw: Mapping[str, Any], warnings: list[str], problems: list[ConfigProblem]) -> dict[str, Any]:
    """The v1 protocol's fields alone: those it does not know dropped with a warning each, an obsolete one
    checked and dropped (nulls and integers written as strings are the models' to read)."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key in OBSOLETE_FIELDS:
            problems.extend(_obsolete_integer(key, value, warnings))
        elif key not in _TOP_FIELDS:
            warnings.append(f"{printable(key, 64)}: unknown field, ignored (kept in the stored config)")
        else:
            out[key] = value
    roles = out.get("taskRoles")
    if isinstance(roles, list):
        out["taskRoles"] = [_clean_role(r, i, warnings) for i, r in enumerate(roles)]
    return out


def _clean_role(role: object, i: int, warnings: list[str]) -> object:
    if not isinstance(role, dict):
        return role
    out: dict[str, Any] = {}
    for key, value in role.items():
        if key not in _ROLE_FIELDS:
            warnings.append(f"taskRoles[{i}].{printable(key, 64)}: unknown field, ignored (kept in the stored config)")
        else:
            out[key] = value
    ports = out.get("portList")
    if isinstance(ports, list):
        cleaned_ports: list[object] = []
        for j, port in enumerate(ports):
            if isinstance(port, dict):
                for key in port.keys() - _PORT_FIELDS:
                    warnings.append(f"taskRoles[{i}].portList[{j}].{printable(key, 64)}: unknown field, ignored")
                port = {k: v for k, v in port.items() if k in _PORT_FIELDS}
            cleaned_ports.append(port)
        out["portList"] = cleaned_ports
    return out


def _obsolete_integer(key: str, value: object, warnings: list[str]) -> list[ConfigProblem]:
    instead = OBSOLETE_FIELDS[key]
    number = joi_integer(value)
    if isinstance(number, bool) or not isinstance(number, int) or abs(number) > MAX_SAFE_INTEGER:
        return [ConfigProblem(path=key, rule=f"must be an integer within +-{MAX_SAFE_INTEGER} (JavaScript's safe "
                                             f"integers), got {json_type(value)} {shown(value)}; it is obsolete "
                                             f"and ignored: {instead}")]
    warnings.append(f"{key}: obsolete, ignored (kept in the stored config); {instead}")
    return []


def _check_free_maps(cleaned: dict[str, Any]) -> list[ConfigProblem]:
    """jobEnvs and extras are free-form maps with rules on their keys (and jobEnvs on its values)."""
    problems: list[ConfigProblem] = []
    envs = _or_empty(cleaned.get("jobEnvs"))  # null: the default, {}
    if not isinstance(envs, dict):
        problems.append(ConfigProblem(path="jobEnvs", rule=f"must be an object, got {json_type(envs)}"))
        cleaned.pop("jobEnvs", None)
    else:
        for key, value in envs.items():
            if not re.fullmatch(JOB_ENV_KEY_PATTERN, key, flags=re.ASCII):
                problems.append(ConfigProblem(path=f"jobEnvs.{key}", rule=f"key must match {JOB_ENV_KEY_PATTERN}"))
            if value is None or isinstance(value, dict | list):
                problems.append(ConfigProblem(
                    path=f"jobEnvs.{key}",
                    rule=f"must be a string, number or boolean, got {json_type(value)}"))
    extras = _or_empty(cleaned.get("extras"))
    if not isinstance(extras, dict):
        problems.append(ConfigProblem(path="extras", rule=f"must be an object, got {json_type(extras)}"))
        cleaned.pop("extras", None)
    else:
        for key in extras:
            if not re.fullmatch(EXTRAS_KEY_PATTERN, key):
                problems.append(ConfigProblem(path=f"extras.{key}", rule=f"key must match {EXTRAS_KEY_PATTERN}"))
        priority = check_priority_class(extras)
        if priority is not None:
            problems.append(priority)
    if problems:
        cleaned.pop("jobEnvs", None)
        cleaned.pop("extras", None)
    return problems


def _or_empty(value: object) -> object:
    return {} if value is None else value


def _roles_valid_alone(roles: object) -> list[TaskRole | None]:
    if not isinstance(roles, list):
        return []
    out: list[TaskRole | None] = []
    for role in roles:
        try:
            out.append(TaskRole.model_validate(role))
        except ValidationError:
            out.append(None)
    return out


def _cross_field_problems(roles: list[TaskRole | None]) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    seen_roles: dict[str, int] = {}
    seen_env_names: dict[str, tuple[int, str]] = {}
    for i, role in enumerate(roles):
        if role is None:
            continue
        at = f"taskRoles[{i}]"
        if role.name in seen_roles:
            problems.append(ConfigProblem(
                path=f"{at}.name",
                rule=f"must be unique among task roles; {role.name!r} is also taskRoles[{seen_roles[role.name]}]"))
        seen_roles.setdefault(role.name, i)
        clash = seen_env_names.setdefault(env_name(role.name), (i, role.name))
        if clash[1] != role.name:
            problems.append(ConfigProblem(
                path=f"{at}.name",
                rule=(f"must differ from taskRoles[{clash[0]}].name once '.' and '~' become '_' in variable "
                      f"names (both are {env_name(role.name)!r})")))
        if role.shm_mb > role.memory_mb:
            problems.append(ConfigProblem(
                path=f"{at}.shmMB", rule=f"must be <= memoryMB ({role.memory_mb}), got {role.shm_mb}"))
        for field, value in (("minFailedTaskCount", role.min_failed_task_count),
                             ("minSucceededTaskCount", role.min_succeeded_task_count)):
            if value is not None and value > role.task_number:
                problems.append(ConfigProblem(
                    path=f"{at}.{field}", rule=f"must be <= taskNumber ({role.task_number}), got {value}"))
        problems.extend(_port_problems(role, at))
    return problems


def _port_problems(role: TaskRole, at: str) -> list[ConfigProblem]:
    """Labels unique (also once made variable names), fixed ranges apart, within 65535. Linear in the
    role's ports: a repeated label is refused as such and its range not walked again."""
    problems: list[ConfigProblem] = []
    labels: set[str] = set()
    env_names: set[str] = set()
    fixed: dict[int, str] = {}
    for j, port in enumerate(role.port_list):
        repeated = port.label in labels
        if repeated:
            problems.append(ConfigProblem(
                path=f"{at}.portList[{j}].label", rule=f"must be unique within the role; {port.label!r} repeats"))
        elif env_name(port.label) in env_names:
            problems.append(ConfigProblem(
                path=f"{at}.portList[{j}].label",
                rule=(f"must differ from the role's other labels once '.' and '~' become '_' "
                      f"({env_name(port.label)!r})")))
        labels.add(port.label)
        env_names.add(env_name(port.label))
        if port.begin_at and not repeated:
            problems.extend(_overlap(fixed, port, f"{at}.portList[{j}]"))
        if port.begin_at and port.begin_at + port.port_number - 1 > 65535:
            problems.append(ConfigProblem(
                path=f"{at}.portList[{j}]",
                rule=f"beginAt + portNumber - 1 must be <= 65535, got {port.begin_at + port.port_number - 1}"))
    return problems


def _overlap(fixed: dict[int, str], port: PortSpec, path: str) -> list[ConfigProblem]:
    """Claim the port's fixed range in ``fixed`` (port -> label), up to the first port another label
    claimed. Each port is claimed once, so all of a role's ranges cost O(65,536 + ports)."""
    for p in range(port.begin_at, port.begin_at + port.port_number):
        if p in fixed and fixed[p] != port.label:
            return [ConfigProblem(path=path, rule=f"port {p} is also asked for by label {fixed[p]!r}")]
        fixed[p] = port.label
    return []


def _dedupe(problems: list[ConfigProblem]) -> list[ConfigProblem]:
    seen: set[tuple[str, str]] = set()
    out = []
    for p in problems:
        if (p.path, p.rule) not in seen:
            seen.add((p.path, p.rule))
            out.append(p)
    return out

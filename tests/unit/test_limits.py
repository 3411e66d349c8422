"""The limits of one job submission (shared.jobconfig.limits): each at, below and above its value, nesting no
recursion can survive, text MongoDB and the engine cannot hold, and refusals worded by paiq alone."""

from __future__ import annotations

import json
import time
import typing
from typing import Any

import bson
import pytest
from hypothesis import given, settings
from pydantic_core import core_schema

from shared.admission.docsize import job_document_bytes, role_shapes, worst_task_record
from shared.admission.validation import (
    MAX_WARNINGS,
    Accepted,
    Rejected,
    limit_problems,
    parse_job_json,
    validate_job_config,
)
from shared.errors import SettingsError
from shared.jobconfig.limits import LIMIT_SETTINGS, JobLimits, bson_bytes, count_values, nesting_depth, walk
from shared.jobconfig.problems import rule_for
from shared.records import JobRecord
from shared.settings.model import Settings
from tests.unit import seed_configs
from tests.unit.factories import config_dict, load_seed_config, port_dict, role_dict
from tests.unit.test_validation import JSON_VALUES, PROPERTY, REFUSALS

pytestmark = pytest.mark.unit

DEFAULT = JobLimits()


def refusal(raw: dict[str, Any], limits: JobLimits = DEFAULT) -> Rejected:
    result = validate_job_config(raw, limits)
    assert isinstance(result, Rejected), f"expected a refusal, got {result!r}"[:400]
    return result


def judged(raw: dict[str, Any], limits: JobLimits = DEFAULT) -> bool:
    return isinstance(validate_job_config(raw, limits), Accepted)


def roles_of(*tasks: int) -> dict[str, Any]:
    return config_dict(*(role_dict(f"r{i}", taskNumber=n) for i, n in enumerate(tasks)))


def nested(depth: int) -> list[Any]:
    """A list nested ``depth`` levels deep, built without recursion (``[[]]`` is 2)."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def deep_body(depth: int) -> bytes:
    """A config whose ``extras.d`` nests lists so that the whole body is ``depth`` levels deep."""
    return json.dumps(config_dict(extras={"d": "DEEP"})).encode().replace(
        b'"DEEP"', b"[" * (depth - 2) + b"]" * (depth - 2))


# --- each limit at, below and above its value ------------------------------------------------------------

SMALL = JobLimits(max_job_tasks=10, max_task_roles=3, max_json_values=200, max_json_depth=8, max_key_bytes=32,
                  max_string_bytes=2048)

# (name, config, limits, accepted?, path of the refusal, words it must hold)
LIMITS: list[tuple[str, dict[str, Any], JobLimits, bool, str, tuple[str, ...]]] = [
    ("tasks below", roles_of(4, 5), SMALL, True, "", ()),
    ("tasks at", roles_of(5, 5), SMALL, True, "", ()),
    ("tasks above", roles_of(5, 6), SMALL, False, "taskRoles",
     ("the job has 11 tasks in all", "at most 10 tasks per job (PAIQ_MAX_JOB_TASKS)", "about 4,400 tasks",
      "OpenPAI's launcher allowed 50,000")),
    ("tasks default at", roles_of(2500, 2500), DEFAULT, True, "", ()),
    ("tasks default above", roles_of(2500, 2501), DEFAULT, False, "taskRoles",
     ("5,001 tasks in all", "at most 5,000 tasks per job (PAIQ_MAX_JOB_TASKS)")),
    ("tasks as strings count", config_dict(role_dict("a", taskNumber="6"), role_dict("b", taskNumber="5.0")),
     SMALL, False, "taskRoles", ("11 tasks in all",)),
    ("roles below", roles_of(1, 1), SMALL, True, "", ()),
    ("roles at", roles_of(1, 1, 1), SMALL, True, "", ()),
    ("roles above", roles_of(1, 1, 1, 1), SMALL, False, "taskRoles",
     ("the job has 4 task roles", "at most 3 task roles per job (PAIQ_MAX_TASK_ROLES)")),
    ("roles default at", roles_of(*[1] * 100), DEFAULT, True, "", ()),
    ("roles default above", roles_of(*[1] * 101), DEFAULT, False, "taskRoles", ("101 task roles", "at most 100")),
    ("depth below", config_dict(extras={"d": nested(5)}), SMALL, True, "", ()),
    ("depth at", config_dict(extras={"d": nested(6)}), SMALL, True, "", ()),
    ("depth above", config_dict(extras={"d": nested(7)}), SMALL, False, "extras.d[0][0][0][0][0][0]",
     ("nests objects and lists 9 levels deep", "at most 8 levels (PAIQ_MAX_JSON_DEPTH)")),
    ("depth default at", config_dict(extras={"d": nested(30)}), DEFAULT, True, "", ()),
    ("depth default above", config_dict(jobEnvs={"d": nested(31)}), DEFAULT, False, "jobEnvs.d" + "[0]" * 30,
     ("33 levels deep", "at most 32 levels")),
    ("key below", config_dict(extras={"k" * 31: 1}), SMALL, True, "", ()),
    ("key at", config_dict(extras={"k" * 32: 1}), SMALL, True, "", ()),
    ("key above", config_dict(extras={"k" * 33: 1}), SMALL, False, "extras." + "k" * 33,
     ("key of 33 bytes", "at most 32 bytes (PAIQ_MAX_KEY_BYTES)")),
    ("key counted in bytes", config_dict(extras={"é" * 17: 1}), SMALL, False, "extras." + "é" * 17,
     ("key of 34 bytes",)),
    ("key default above", config_dict(extras={"k" * 1025: 1}), DEFAULT, False, "extras." + "k" * 40 + "...",
     ("key of 1,025 bytes", "at most 1,024 bytes")),
    ("unknown field's key above", config_dict(**{"u" * 33: 1}), SMALL, False, "u" * 33, ("key of 33 bytes",)),
    ("string below", config_dict(extras={"s": "x" * 2047}), SMALL, True, "", ()),
    ("string at", config_dict(extras={"s": "x" * 2048}), SMALL, True, "", ()),
    ("string above", config_dict(extras={"s": "x" * 2049}), SMALL, False, "extras.s",
     ("string of 2,049 bytes", "at most 2,048 bytes (PAIQ_MAX_STRING_BYTES)")),
    ("string counted in bytes", config_dict(extras={"s": "€" * 683}), SMALL, False, "extras.s",
     ("string of 2,049 bytes",)),
    ("string default at", config_dict(jobEnvs={"S": "x" * 131072}), DEFAULT, True, "", ()),
    ("string default above", config_dict(role_dict(command="x" * 131073)), DEFAULT, False, "taskRoles[0].command",
     ("string of 131,073 bytes", "at most 131,072 bytes")),
    ("values below", config_dict(extras={"v": [0] * 180}), SMALL, True, "", ()),
    ("values above", config_dict(extras={"v": [0] * 200}), SMALL, False, "(body)",
     ("more than 200 JSON values", "(PAIQ_MAX_JSON_VALUES)")),
    ("integer at 2^63-1", config_dict(extras={"n": 2**63 - 1}), DEFAULT, True, "", ()),
    ("integer at -2^63", config_dict(tmp=-(2**63)), DEFAULT, True, "", ()),
    ("integer past 2^63-1", config_dict(extras={"n": 2**63}), DEFAULT, False, "extras.n",
     ("an integer of 19 digits", "at most 8 bytes")),
    ("integer past -2^63", config_dict(tmp={"n": [-(2**63) - 1]}), DEFAULT, False, "tmp.n[0]", ("8 bytes",)),
    ("integer of 4,000 digits", config_dict(jobEnvs={"N": 10**3999}), DEFAULT, False, "jobEnvs.N",
     ("an integer of 4,000 digits",)),
    ("number past a float", config_dict(extras={"x": float("inf")}), DEFAULT, False, "extras.x",
     ("must be a finite number",)),
]


@pytest.mark.parametrize(("raw", "limits", "ok", "path", "words"), [c[1:] for c in LIMITS], ids=[c[0] for c in LIMITS])
def test_each_limit_at_below_and_above(raw: dict[str, Any], limits: JobLimits, ok: bool, path: str,
                                      words: tuple[str, ...]) -> None:
    result = validate_job_config(raw, limits)
    if ok:
        assert isinstance(result, Accepted), getattr(result, "message", result)[:400]
        return
    assert isinstance(result, Rejected)
    rules = [p.rule for p in result.problems if p.path == path]
    assert rules, f"no problem at {path}; got {result.message[:400]}"
    for word in words:
        assert word in rules[0], f"{rules[0]!r} does not say {word!r}"


def test_the_document_limit_at_below_and_above() -> None:
    raw = config_dict(role_dict("w", taskNumber=40, gpuNumber=2, portList=[port_dict("http", 0, 3)]),
                      extras={"blob": "x" * 5000})
    size = job_document_bytes(walk(raw, DEFAULT).bson_bytes, role_shapes(raw["taskRoles"]), 1).total
    assert judged(raw, JobLimits(max_document_bytes=size + 1))
    assert judged(raw, JobLimits(max_document_bytes=size))
    [problem] = refusal(raw, JobLimits(max_document_bytes=size - 1)).problems
    assert problem.path == "(body)"
    for words in (f"could grow to {size:,} bytes", "40 task records", f"at most {size - 1:,} bytes a job",
                  "PAIQ_MAX_JOB_DOCUMENT_BYTES", "16 MiB"):
        assert words in problem.rule


def test_the_largest_job_the_defaults_allow_fits_its_document() -> None:
    """5,000 tasks and a config of 1 MB of text: well within the default 12 MiB."""
    raw = config_dict(*(role_dict(f"r{i}", taskNumber=2500, portList=[port_dict("http", 0, 2)]) for i in range(2)),
                      extras={"blob": ["x" * 100_000] * 10})
    assert judged(raw)


# --- nesting: no recursion, whatever the depth ----------------------------------------------------------


@pytest.mark.parametrize("depth", [33, 300, 700])
def test_bodies_nested_deeper_than_the_limit_are_refused_with_their_depth(depth: int) -> None:
    parsed = parse_job_json(deep_body(depth))
    assert isinstance(parsed, dict), "the decoder itself takes these"
    [problem] = refusal(parsed).problems
    assert problem.path == "extras.d" + "[0]" * 30
    assert problem.rule == (f"nests objects and lists {depth:,} levels deep; paiq accepts at most 32 levels "
                            "(PAIQ_MAX_JSON_DEPTH)")


@pytest.mark.parametrize("depth", [970, 10_000, 30_000])
def test_bodies_too_deep_for_the_decoder_are_refused_with_their_depth(depth: int) -> None:
    """Python's decoder gives up near 1,000 levels (fewer with a deeper stack): either it or the walk
    refuses, naming the depth."""
    parsed = parse_job_json(deep_body(depth))
    result = refusal(parsed) if isinstance(parsed, dict) else parsed
    assert f"nests objects and lists {depth:,} levels deep; paiq accepts at most 32 levels (PAIQ_MAX_JSON_DEPTH)" \
        == result.problems[0].rule
    if depth > 10_000:  # each level is a value too
        assert result.problems[1].rule.startswith(f"holds {depth + 6:,} JSON values")


def test_a_body_deeper_than_it_has_values_to_spare_is_refused_for_its_values() -> None:
    result = parse_job_json(deep_body(400_000))
    assert isinstance(result, Rejected) and "holds 400,006 JSON values" in result.message


def test_a_decoded_body_nested_100000_levels_is_refused_without_recursion() -> None:
    result = refusal(config_dict(extras={"d": nested(100_000)}), JobLimits(max_json_values=10**6))
    assert [p.path for p in result.problems] == ["extras.d" + "[0]" * 30]
    assert "100,002 levels deep" in result.message


@pytest.mark.parametrize("depth", [32, 33])
def test_the_depth_limit_on_the_json_path_at_and_above(depth: int) -> None:
    parsed = parse_job_json(deep_body(depth))
    assert isinstance(parsed, dict)
    assert judged(parsed) == (depth <= 32)


# --- text MongoDB and the engine cannot hold -----------------------------------------------------------

# (where, the body as JSON text with one \udfff escape, the path named)
PLACES = [
    ("jobName", '{"jobName": "a\\udfffb", "image": "i", "taskRoles": [{"name": "r", "command": "c"}]}', "jobName"),
    ("image", '{"jobName": "j", "image": "\\udfff", "taskRoles": [{"name": "r", "command": "c"}]}', "image"),
    ("a role's name", '{"jobName": "j", "image": "i", "taskRoles": [{"name": "\\udfff", "command": "c"}]}',
     "taskRoles[0].name"),
    ("a command", '{"jobName": "j", "image": "i", "taskRoles": [{"name": "r", "command": "ok \\udfff"}]}',
     "taskRoles[0].command"),
    ("a port label", '{"jobName": "j", "image": "i", "taskRoles": [{"name": "r", "command": "c", '
                     '"portList": [{"label": "\\udfff"}]}]}', "taskRoles[0].portList[0].label"),
    ("a jobEnvs value", '{"jobName": "j", "image": "i", "taskRoles": [{"name": "r", "command": "c"}], '
                        '"jobEnvs": {"A": "\\udfff"}}', "jobEnvs.A"),
    ("a jobEnvs key", '{"jobName": "j", "image": "i", "taskRoles": [{"name": "r", "command": "c"}], '
                      '"jobEnvs": {"A\\udfff": "v"}}', "jobEnvs.A\\udfff"),
    ("an extras value", '{"jobName": "j", "image": "i", "taskRoles": [{"name": "r", "command": "c"}], '
                        '"extras": {"a": {"b": ["x", "\\udfff"]}}}', "extras.a.b[1]"),
    ("an extras key", '{"jobName": "j", "image": "i", "taskRoles": [{"name": "r", "command": "c"}], '
                      '"extras": {"a": {"\\ud800": 1}}}', "extras.a.\\ud800"),
    ("an unknown field's value", '{"jobName": "j", "image": "i", "taskRoles": [{"name": "r", "command": "c"}], '
                                 '"tmp": "\\udfff"}', "tmp"),
    ("an unknown field's key", '{"jobName": "j", "image": "i", "taskRoles": [{"name": "r", "command": "c"}], '
                               '"\\udfff": 1}', "\\udfff"),
    ("an unknown role field", '{"jobName": "j", "image": "i", "taskRoles": [{"name": "r", "command": "c", '
                              '"storage\\udfff": 5}]}', "taskRoles[0].storage\\udfff"),
    ("a high surrogate alone", '{"jobName": "j", "image": "i", "taskRoles": [{"name": "r", "command": "c"}], '
                               '"extras": {"a": "x\\ud83d"}}', "extras.a"),
    ("a pair reversed", '{"jobName": "j", "image": "i", "taskRoles": [{"name": "r", "command": "c"}], '
                        '"extras": {"a": "\\ude00\\ud83d"}}', "extras.a"),
]


@pytest.mark.parametrize(("text", "path"), [p[1:] for p in PLACES], ids=[p[0] for p in PLACES])
def test_a_lone_surrogate_anywhere_is_refused_at_its_path(text: str, path: str) -> None:
    parsed = parse_job_json(text.encode())
    assert isinstance(parsed, dict)
    result = refusal(parsed)
    assert [p.path for p in result.problems] == [path]
    assert "lone surrogate" in result.message and "\\ud800-\\udfff" in result.message
    result.message.encode()  # the refusal itself is text every client can take


@pytest.mark.parametrize(("text", "path"), [(p[1].replace("\\udfff", "\\u0000").replace("\\ud800", "\\u0000"),
                                             p[2].replace("\\udfff", "\\u0000").replace("\\ud800", "\\u0000"))
                                            for p in PLACES[:12]], ids=[p[0] for p in PLACES[:12]])
def test_a_nul_character_anywhere_is_refused_at_its_path(text: str, path: str) -> None:
    parsed = parse_job_json(text.encode())
    assert isinstance(parsed, dict)
    result = refusal(parsed)
    assert [p.path for p in result.problems] == [path]
    assert "NUL character" in result.message and "MongoDB" in result.message


def test_a_surrogate_pair_is_one_character_and_accepted() -> None:
    parsed = parse_job_json(b'{"jobName": "j", "image": "i", "tmp": {"\\ud83d\\ude00": "\\ud83d\\ude00"}, '
                            b'"taskRoles": [{"name": "r", "command": "echo \\ud83d\\ude00"}]}')
    assert isinstance(parsed, dict)
    result = validate_job_config(parsed)
    assert isinstance(result, Accepted) and result.config.task_roles[0].command == "echo \U0001f600"


def test_many_problems_are_counted_not_listed() -> None:
    result = refusal(config_dict(extras={f"k{i}": "\udfff" for i in range(5000)}))
    assert len(result.problems) == 11
    assert result.problems[-1].rule == "and 4,990 more problems like these, not listed"
    assert len(result.message) < 4000


# --- the attacker's bodies, and what the work costs ----------------------------------------------------------


def test_the_attackers_job_is_refused_before_any_work_per_task() -> None:
    """100 roles of 10,000 tasks in 9 KB: 1,000,000 tasks, refused from the raw JSON in milliseconds."""
    body = json.dumps(config_dict(*(role_dict(f"role{i}", taskNumber=10_000) for i in range(100)))).encode()
    started = time.perf_counter()
    result = parse_job_json(body)
    assert isinstance(result, dict)
    problems = refusal(result).problems
    assert time.perf_counter() - started < 0.5
    assert [str(p) for p in problems] == [
        "taskRoles: the job has 1,000,000 tasks in all; paiq runs at most 5,000 tasks per job (PAIQ_MAX_JOB_TASKS): "
        "every task's environment lists every task's host and ports, and Linux starts a task only if its "
        "environment fits: about 4,400 tasks with the default ports (OpenPAI's launcher allowed 50,000 a role)"]


def test_a_body_of_more_values_than_allowed_is_refused_before_it_is_decoded() -> None:
    body = json.dumps(config_dict(extras={"v": [[]] * 250_000})).encode()
    assert len(body) < 1024 * 1024
    result = parse_job_json(body)
    assert isinstance(result, Rejected)
    assert result.message == ("(body): holds 250,009 JSON values; paiq accepts at most 10,000 in a job "
                              "(PAIQ_MAX_JSON_VALUES)")


def test_the_checks_grow_linearly_with_the_body() -> None:
    def seconds(n: int) -> float:
        raw = config_dict(extras={"v": [{"a": [1, "x"]}] * n})
        started = time.perf_counter()
        limit_problems(raw, JobLimits(max_json_values=10**7))
        return time.perf_counter() - started

    seconds(1000)
    small, large = min(seconds(5_000) for _ in range(3)), min(seconds(50_000) for _ in range(3))
    assert large < small * 25, (small, large)  # ten times the body: not a hundred times the work


def test_repeated_fixed_port_ranges_cost_linear_time() -> None:
    ports = [port_dict("same", 1000, 1000)] * 10_000
    started = time.perf_counter()
    result = refusal(config_dict(role_dict(portList=ports)), JobLimits(max_json_values=100_000))
    assert time.perf_counter() - started < 2
    assert {p.rule for p in result.problems} == {"must be unique within the role; 'same' repeats"}


def test_warnings_about_unknown_fields_are_capped() -> None:
    result = validate_job_config(config_dict(**{f"unknown{i}": i for i in range(100)}))
    assert isinstance(result, Accepted)
    assert len(result.warnings) == MAX_WARNINGS + 1
    assert result.warnings[-1] == "and 80 more unknown fields, ignored (kept in the stored config)"


def test_warnings_quote_keys_as_safe_text() -> None:
    result = validate_job_config(config_dict(**{"line\nbreak": 1, "k" * 500: 2}))
    assert isinstance(result, Accepted)
    assert result.warnings[0].startswith("line\\u000abreak: unknown field")
    assert result.warnings[1].startswith("k" * 64 + "...: unknown field")


# --- the sizes as MongoDB counts them ------------------------------------------------------------------


@PROPERTY
@given(JSON_VALUES)
def test_the_walk_sizes_a_body_exactly_as_bson_and_counts_its_values_as_the_bytes_do(value: Any) -> None:
    body = {"v": value, "w": [value, {"x": value}]}
    try:
        encoded = bson.encode(body)
        text = json.dumps(body, allow_nan=False).encode()
    except (OverflowError, ValueError, bson.errors.InvalidDocument):
        return  # an integer past 8 bytes, NaN, a NUL in a key: the walk refuses those
    figures = walk(body, JobLimits(max_json_values=10**9, max_json_depth=10**9))
    assert figures.bson_bytes == len(encoded)
    assert count_values(text, at_most=0) == figures.values == count_values(json.dumps(body, indent=1).encode(),
                                                                           at_most=0)


@settings(max_examples=50, deadline=None, database=None)
@given(JSON_VALUES)
def test_the_depth_from_bytes_is_the_decoded_depth(value: Any) -> None:
    text = json.dumps({"v": value}).encode()
    assert nesting_depth(text) == walk({"v": value}, JobLimits(max_json_values=10**9)).depth


@pytest.mark.parametrize("body", [b'"\\', b'"' + b'\\"' * 200_000, b'{"a": "x, [{' * 30_000])
def test_counting_hostile_bytes_is_linear(body: bytes) -> None:
    started = time.perf_counter()
    count_values(body, at_most=10)
    nesting_depth(body)
    assert time.perf_counter() - started < 1


@pytest.mark.parametrize("name", ["TF_EXAMPLE_000", "TF_EXAMPLE_002", "HELLOWORLD_004", "JUPYTER_004"])
def test_the_document_estimate_bounds_the_real_document_with_every_task_at_its_largest(name: str) -> None:
    raw = load_seed_config(getattr(seed_configs, name))
    raw["taskRoles"][0]["taskNumber"] = 300
    result = validate_job_config(raw)
    assert isinstance(result, Accepted)
    shapes = role_shapes(raw["taskRoles"])
    total = sum(s.tasks for s in shapes)
    tasks = tuple(worst_task_record(s, total).model_copy(update={"index": i})
                  for s in shapes for i in range(s.tasks))
    job = JobRecord(id="u~" + "j" * 255 + "~12345678", user="u" * 64, name="j" * 255, virtual_cluster="v" * 64,
                    config=result.config, raw_config=result.raw, warnings=result.warnings, created_ms=2**42,
                    tasks=tasks, reason="r" * 4000, exit_diagnostics="d" * 4000, exit_reason="e" * 1000)
    document = job.to_document(packed=False)  # what the estimate sizes; packed, a document is never larger
    document["hold_nodes"] = ["n" * 64] * total  # every task on a node of its own
    real = len(bson.encode(document))
    assert len(bson.encode({**job.to_document(), "hold_nodes": document["hold_nodes"]})) <= real
    estimate = job_document_bytes(walk(raw, DEFAULT).bson_bytes, shapes, 0 if name != "TF_EXAMPLE_000" else 2)
    assert estimate.raw == len(bson.encode(raw))
    assert real <= estimate.total < real * 1.2


def test_bson_bytes_is_pymongos_size() -> None:
    value = {"a": [1, 2**40, 1.5, None, True, "é", {"b": []}], "c": {}}
    assert bson_bytes(value) == len(bson.encode(value))


# --- our words, never pydantic's -----------------------------------------------------------------------------


ERROR_TYPES = typing.get_args(core_schema.ErrorType)


@pytest.mark.parametrize("kind", ERROR_TYPES)
def test_every_pydantic_error_type_gets_our_own_wording(kind: str) -> None:
    err = {"type": kind, "loc": ("x",), "msg": "PYDANTIC SAYS THIS", "input": "v",
           "ctx": {"ge": 1, "le": 2, "gt": 1, "lt": 2, "pattern": "^a$", "max_length": 3, "min_length": 1,
                   "expected": "'a'", "error": "e", "class": "C"},
           "url": "https://errors.pydantic.dev/2/v/" + kind}
    rule = rule_for(err)
    assert rule and "PYDANTIC" not in rule and "http" not in rule and "Input should" not in rule


ALL_REFUSALS = [*[(c[0], c[1], DEFAULT) for c in REFUSALS], *[(c[0], c[1], c[2]) for c in LIMITS if not c[3]]]


@pytest.mark.parametrize(("raw", "limits"), [c[1:] for c in ALL_REFUSALS], ids=[c[0] for c in ALL_REFUSALS])
def test_no_refusal_carries_pydantic_text_or_a_link(raw: dict[str, Any], limits: JobLimits) -> None:
    message = refusal(raw, limits).message
    for text in ("pydantic", "http://", "https://", "Input should", "For further information", "type="):
        assert text not in message, message


# --- the settings ------------------------------------------------------------------------------------------


def test_limits_default_to_what_fits_real_jobs() -> None:
    assert Settings.from_env({"PAIQ_NODE_ID": "n"}).job_limits == DEFAULT == JobLimits(
        max_job_tasks=5000, max_task_roles=100, max_json_values=10_000, max_json_depth=32, max_key_bytes=1024,
        max_string_bytes=128 * 1024, max_document_bytes=12 * 1024 * 1024)


def test_limits_are_read_from_their_settings() -> None:
    env = {var: str(least) for var, least, _ in LIMIT_SETTINGS.values()}
    limits = Settings.from_env({"PAIQ_NODE_ID": "n", **env}).job_limits
    assert [getattr(limits, f) for f in LIMIT_SETTINGS] == [least for _, least, _ in LIMIT_SETTINGS.values()]


@pytest.mark.parametrize(("var", "value"), [(var, v) for var, least, most in LIMIT_SETTINGS.values()
                                            for v in (str(least - 1), str(most + 1))] + [("PAIQ_MAX_JOB_TASKS", "x")])
def test_a_limit_out_of_its_bounds_is_a_settings_error_naming_it(var: str, value: str) -> None:
    with pytest.raises(SettingsError, match=var):
        Settings.from_env({"PAIQ_NODE_ID": "n", var: value})

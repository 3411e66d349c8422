"""A protocol v2 body is untrusted YAML: read as js-yaml read it where it matters, refused fast and with
bounded memory for alias bombs, custom tags, duplicate keys, other documents and bytes that are not UTF-8;
and the v2 core stays pure."""

from __future__ import annotations

import datetime as dt
import time
import tracemalloc
from typing import Any

import pytest

from shared.admission.v2.checks import validate_v2_body
from shared.admission.validation import Rejected
from shared.jobconfig.limits import JobLimits
from shared.jobconfig.problems import ConfigProblem
from shared.jobconfig.v2.jsvalues import js_number, js_string
from shared.jobconfig.v2.yamlbody import MAX_BODY_BYTES, load_yaml_body
from tests.unit.test_pure_cores import IO, _closure

pytestmark = pytest.mark.unit
LIMITS = JobLimits()


def load(text: str | bytes, limits: JobLimits = LIMITS) -> Any:
    return load_yaml_body(text.encode() if isinstance(text, str) else text, limits)


def refused(text: str | bytes, *words: str, limits: JobLimits = LIMITS) -> ConfigProblem:
    got = load(text, limits)
    assert isinstance(got, ConfigProblem), f"expected a refusal, got {got!r}"
    assert got.path == "(body)"
    for word in words:
        assert word in got.rule, got.rule
    return got


@pytest.mark.parametrize(("text", "value"), [
    ("a: yes", "yes"), ("a: no", "no"), ("a: on", "on"), ("a: off", "off"), ("a: y", "y"),
    ("a: true", True), ("a: False", False), ("a: TRUE", True),
    ("a: ~", None), ("a: null", None), ("a:", None), ("a: Null", None),
    ("a: 010", 8), ("a: 0x1F", 31), ("a: 0b101", 5), ("a: 1_000", 1000), ("a: 1:30", 90), ("a: -0x10", -16),
    ("a: 09", "09"), ("a: 0o7", "0o7"), ("a: 1e3", 1000.0), ("a: .5", 0.5), ("a: 2.0", 2.0),
    ("a: 2021-01-01", dt.date(2021, 1, 1)), ('a: "2"', "2"), ("a: '010'", "010"), ("a: !!str 10", "10"),
])
def test_scalars_as_js_yaml_read_them(text: str, value: Any) -> None:
    assert load(text) == {"a": value}
    assert type(load(text)["a"]) is type(value)


def test_keys_are_strings_as_javascript_wrote_them() -> None:
    assert load("1: a\ntrue: b\nnull: c\n2.5: d") == {"1": "a", "true": "b", "null": "c", "2.5": "d"}


def test_json_text_is_yaml() -> None:
    assert load('{"a": [1, 2.5, "x", true, null], "b": {"c": "d"}}') == {"a": [1, 2.5, "x", True, None],
                                                                        "b": {"c": "d"}}


@pytest.mark.parametrize(("text", "words"), [
    ("a: 1\na: 2\n", ("'a' twice", "line 2")),
    ("1: x\n'1': y\n", ("'1' twice",)),  # String(1) is "1" too
    ("a: &x {k: 1}\nb:\n  k: 2\n  <<: *x\n  k: 3\n", ("'k' twice",)),  # a merge never makes a key overridable
])
def test_duplicate_keys_are_refused(text: str, words: tuple[str, ...]) -> None:
    refused(text, *words)


def test_a_merged_key_may_be_overridden() -> None:
    assert load("a: &x {k: 1, j: 2}\nb:\n  <<: *x\n  k: 3\n")["b"] == {"k": 3, "j": 2}


@pytest.mark.parametrize(("text", "tag"), [
    ("a: !!python/object:os.system ls", "python/object"), ("a: !mytag x", "!mytag"),
    ("a: !!binary aGk=", "binary"), ("a: !!set {x}", "set"), ("a: !!omap [b: 1]", "omap"),
    ("a: !!python/name:os.system ''", "python/name"),
])
def test_tags_other_than_yamls_own_are_refused(text: str, tag: str) -> None:
    refused(text, tag, "tag")


def test_one_document_only() -> None:
    refused("a: 1\n---\nb: 2\n", "one document")


@pytest.mark.parametrize("body", [b"a: \xff", b"a: \xc3", b"\xfe\xffa: 1", "a: é".encode("latin-1")])
def test_text_that_is_not_utf8_is_refused(body: bytes) -> None:
    refused(body, "UTF-8")


def test_a_utf8_bom_is_read_as_nothing() -> None:
    assert load("\ufeffa: 1".encode()) == {"a": 1}


def test_syntax_errors_say_where() -> None:
    refused("a:\n  b: 1\n c: 2\n", "line 3")


def test_the_body_size_is_that_of_json_bodies() -> None:
    refused(b"a: " + b"x" * MAX_BODY_BYTES, "at most")


def _laughs(levels: int, width: int = 10) -> str:
    lines = ["l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(10)
def test_a_billion_laughs_is_refused_before_anything_grows() -> None:
    tracemalloc.start()
    started = time.monotonic()
    try:
        refused(_laughs(9), "aliases", "PAIQ_MAX_JSON_VALUES")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 1
    assert peak < 5 * 1024 * 1024


def test_merges_of_aliases_are_counted_too() -> None:
    text = _laughs(3) + "m:\n" + "".join(f"  k{i}:\n    <<: *l2\n" for i in range(20))
    refused(text, "aliases", limits=JobLimits(max_json_values=1000))


def test_a_few_aliases_within_the_limit_are_read() -> None:
    assert load(_laughs(2, width=3))["l1"] == [["lol"] * 3] * 3


@pytest.mark.parametrize("text", ["[" * 40 + "]" * 40, "a:\n" + "".join(" " * i + "- \n" for i in range(1, 50)),
                                  "{a: " * 40 + "1" + "}" * 40])
def test_depth_is_refused_while_reading(text: str) -> None:
    refused(text, "32 levels", "PAIQ_MAX_JSON_DEPTH")


@pytest.mark.timeout(10)
def test_deep_nesting_of_a_whole_body_is_refused_fast() -> None:
    started = time.monotonic()
    refused("[" * (MAX_BODY_BYTES - 10))
    assert time.monotonic() - started < 1


def test_too_many_values_without_aliases() -> None:
    refused("a: [" + ", ".join(["1"] * 20_000) + "]", "it is expanded", "PAIQ_MAX_JSON_VALUES")


def _job(extra: str = "", command: str = "echo hi") -> str:
    return ("protocolVersion: 2\nname: j\ntype: job\nprerequisites:\n  - {name: img, type: dockerimage, uri: ubuntu}\n"
            f"taskRoles:\n  w:\n    dockerImage: img\n    resourcePerInstance: {{cpu: 1, memoryMB: 1024, gpu: 0}}\n"
            f"    commands: [{command!r}]\n{extra}")


@pytest.mark.parametrize(("extra", "path", "words"), [
    ("extras: {k: '" + "x" * 200_000 + "'}\n", "extras.k", ("string of 200,000 bytes",)),
    ("extras:\n  ? '" + "k" * 2000 + "'\n  : 1\n", "extras.kkkk", ("key of 2,000 bytes",)),  # an explicit key
    ('extras: {k: "a\\0b"}\n', "extras.k", ("NUL",)),
    ("extras: {k: " + "9" * 30 + "}\n", "extras.k", ("digits",)),
])
def test_keys_and_strings_have_the_limits_of_json_bodies(extra: str, path: str, words: tuple[str, ...]) -> None:
    result = validate_v2_body(_job(extra).encode())
    assert isinstance(result, Rejected)
    problem = next(p for p in result.problems if p.path.startswith(path))
    for word in words:
        assert word in problem.rule


def test_a_parameter_written_many_times_cannot_grow_a_command_without_bound() -> None:
    body = _job("parameters: {big: '" + "x" * 60_000 + "'}\n", command="<% $parameters.big %>" * 10)
    result = validate_v2_body(body.encode())
    assert isinstance(result, Rejected)
    assert result.problems[0].path == "taskRoles.w.commands" and "grows past" in result.problems[0].rule


@pytest.mark.timeout(30)
def test_the_worst_allowed_body_is_read_in_bounded_time() -> None:
    """Just under every limit: about 10,000 values in a 1 MiB body."""
    body = _job("extras:\n  k: [" + ", ".join([f"'{'v' * 90}'"] * 9_900) + "]\n").encode()
    assert len(body) < MAX_BODY_BYTES
    started = time.monotonic()
    validate_v2_body(body)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(("value", "text"), [
    (10.0, "10"), (0.01, "0.01"), (1e21, "1e+21"), (1e20, "100000000000000000000"), (1.5e-7, "1.5e-7"),
    (1e-6, "0.000001"), (-3.0, "-3"), (2**60, "1152921504606847000"), (0.5, "0.5"), (123.456, "123.456"),
])
def test_numbers_are_written_as_javascript_wrote_them(value: float, text: str) -> None:
    assert js_number(value) == text


def test_values_are_written_as_javascript_wrote_them() -> None:
    assert [js_string(v) for v in (True, None, ["a", None, 1], {"k": 1}, dt.date(2021, 1, 1))] == [
        "true", "null", "a,,1", "[object Object]", "2021-01-01T00:00:00.000Z"]


def test_the_v2_core_is_pure() -> None:
    """protocol v2's modules (shared.jobconfig.v2, shared.admission.v2) import no I/O."""
    modules = ["shared.jobconfig.v2", *(f"shared.jobconfig.v2.{m}" for m in ("yamlbody", "model", "render", "fromjob",
                                                                             "jsvalues")),
               "shared.admission.v2", *(f"shared.admission.v2.{m}" for m in ("checks", "tojob"))]
    for module in modules:
        bad = {m: by for m, by in _closure(module).items() if m.split(".")[0] in IO or m in IO}
        assert not bad, f"{module} reaches I/O: {bad}"

"""What one job submission may ask of paiq, checked on the request body before any work that grows with it.

A job body is at most 1 MiB, yet a few kilobytes can ask for a million tasks, a body of ``[[],[],...]``
becomes hundreds of thousands of objects, and text MongoDB or the container engine cannot hold turns
up only when it is stored or started. :class:`JobLimits` bounds each of these; every figure is a setting
(``PAIQ_*``, read by :mod:`shared.settings.model`, named in :data:`LIMIT_SETTINGS`).

The checks here walk the decoded body once, iteratively (a stack, never recursion, so no nesting can
overflow it), in O(size of the body), and stop at the first container past the allowed number of values.
Before the body is even decoded, :func:`count_values` counts its values from the bytes (linear, no
backtracking), so an oversized body never becomes Python objects. Each refusal is a
:class:`~shared.jobconfig.problems.ConfigProblem` naming the JSON path, the limit and the value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.jobconfig.model import MAX_ROLE_TASKS, MAX_TASK_ROLES
from shared.jobconfig.problems import ConfigProblem

MIB = 1024 * 1024
MAX_ARG_STRLEN = 128 * 1024  # Linux: the longest variable or argument a process may be started with
INT64 = 2**63  # MongoDB's integers are at most 8 bytes: -2**63 .. 2**63 - 1
INT32 = 2**31
MAX_LISTED = 10  # problems of the body listed in one answer; the rest are counted


@dataclass(frozen=True)
class JobLimits:
    """Bounds on one job submission (see docs, "Limits of a job"); the defaults fit real jobs."""

    # Every task's environment lists every task's host and ports, and Linux starts a process only if its
    # environment fits (shared/admission/envsize.py): about 4,400 tasks with the default ports (4,490 at best).
    # 5,000 is a round bound above that, checked before anything is built per task.
    max_job_tasks: int = MAX_ROLE_TASKS
    max_task_roles: int = MAX_TASK_ROLES  # each role adds its variables and host list to every task's environment
    # Real configs hold tens to hundreds of values. Each value costs about a microsecond to decode and
    # one to two to store, in calls that hold the interpreter's lock throughout (json.loads, pydantic's
    # model_dump of the job document on the event loop): 10,000 keeps each such call to about 10 ms.
    max_json_values: int = 10_000
    max_json_depth: int = 32  # the protocol nests 5 levels; MongoDB refuses documents nested over 100
    max_key_bytes: int = 1024  # keys name fields, variables and the paths of refusals; the protocol's are 21 at most
    max_string_bytes: int = MAX_ARG_STRLEN  # no string reaches a container in a larger piece
    max_document_bytes: int = 12 * MIB  # MongoDB's limit is 16 MiB a document


# Field -> (setting, least, most). Tasks and roles may only be lowered: no job of more than about 4,460
# tasks can start (every role has an http and an ssh port), and the model bounds a role's tasks and the
# roles likewise. The most of the others keeps the stored job document within MongoDB's limits (16 MiB,
# 100 levels of nesting: the job document nests the config one level down).
LIMIT_SETTINGS: dict[str, tuple[str, int, int]] = {
    "max_job_tasks": ("PAIQ_MAX_JOB_TASKS", 1, MAX_ROLE_TASKS),
    "max_task_roles": ("PAIQ_MAX_TASK_ROLES", 1, MAX_TASK_ROLES),
    "max_json_values": ("PAIQ_MAX_JSON_VALUES", 1000, 1_000_000),
    "max_json_depth": ("PAIQ_MAX_JSON_DEPTH", 5, 90),
    "max_key_bytes": ("PAIQ_MAX_KEY_BYTES", 32, 65536),
    "max_string_bytes": ("PAIQ_MAX_STRING_BYTES", 1024, MIB),
    "max_document_bytes": ("PAIQ_MAX_JOB_DOCUMENT_BYTES", MIB, 15 * MIB),
}


def setting(field: str) -> str:
    return LIMIT_SETTINGS[field][0]


# --- the body's bytes, before decoding ------------------------------------------------------------------

# A JSON string, or what is left of an unterminated one: it always matches from its opening quote, so a
# hostile body of quotes and backslashes cannot make the scan start again at every quote.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
_BLANKS = b" \t\r\n"
_BRACKET_RUNS = re.compile(rb"[\[{]+|[\]}]+")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def count_values(body: bytes, *, at_most: int) -> int:
    """How many JSON values ``body`` holds (object keys not counted) once that may pass ``at_most``: exact
    for valid JSON, in linear time; a bound of at most ``at_most`` when even every comma and bracket
    of the body would not pass it."""
    quick = 1 + body.count(b",") + body.count(b"[") + body.count(b"{")
    if quick <= at_most:
        return quick
    text = _STRING.sub(b"0", body).translate(None, _BLANKS)
    # Every non-empty container's items are its commas plus one; the body itself is one more value.
    empty = text.count(b"[]") + text.count(b"{}")
    return 1 + text.count(b",") + text.count(b"[") + text.count(b"{") - empty


def nesting_depth(body: bytes) -> int:
    """How deeply ``body`` nests objects and lists (``{}`` is 1), from its bytes: for a body too deep for
    the JSON decoder itself."""
    brackets = _STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    level = deepest = 0
    for run in _BRACKET_RUNS.finditer(brackets):
        step = len(run.group())
        level += step if run.group()[0] in b"[{" else -step
        deepest = max(deepest, level)
    return deepest


# --- the decoded body: one walk -------------------------------------------------------------------------

# A JSON path as a chain of (parent, key) links, built in O(1) per value and spelled only when refused.
Link = tuple[Any, str | int] | None
_CONTROLS = {c: f"\\u{c:04x}" for c in (*range(32), 127)}


def printable(text: str, limit: int = 40) -> str:
    """A key or value as a message quotes it: at most ``limit`` characters, with lone surrogates and
    control characters escaped (a message must itself be text any client can take)."""
    cut = text if len(text) <= limit else text[:limit] + "..."
    return cut.encode("utf-8", "backslashreplace").decode().translate(_CONTROLS)


def spelled(link: Link) -> str:
    """``taskRoles[0].portList[1].label``, as :mod:`shared.jobconfig.problems` spells paths."""
    keys: list[str | int] = []
    while link is not None:
        link, key = link
        keys.append(key)
    out = ""
    for key in reversed(keys):
        if isinstance(key, int):
            out += f"[{key}]"
        else:
            out += f".{printable(key)}" if out else printable(key)
    return out or "(body)"


@dataclass(frozen=True)
class BodyFigures:
    """What one walk of a body found: its problems, and its size as MongoDB stores it (BSON)."""

    problems: tuple[ConfigProblem, ...]
    bson_bytes: int
    values: int
    depth: int


class _Walk:
    """One pass over a decoded body: sizes as BSON counts them, and every limit on keys and values."""

    def __init__(self, limits: JobLimits) -> None:
        self.limits = limits
        self.problems: list[ConfigProblem] = []
        self.unlisted = 0
        self.size = 0
        self.values = 1  # the body itself
        self.depth = 0
        self.too_deep: Link = None
        self.stack: list[tuple[Mapping[str, Any] | list[Any] | tuple[Any, ...], Link, int]] = []

    def refuse(self, link: Link, rule: str) -> None:
        if len(self.problems) < MAX_LISTED:
            self.problems.append(ConfigProblem(path=spelled(link), rule=rule))
        else:
            self.unlisted += 1

    def run(self, body: Mapping[str, Any]) -> BodyFigures:
        self.stack.append((body, None, 1))
        while self.stack and self.values <= self.limits.max_json_values:
            node, link, depth = self.stack.pop()
            if depth > self.depth:
                self.depth = depth
                if depth > self.limits.max_json_depth and self.too_deep is None:
                    self.too_deep = link
            self.size += 5  # a document's length and its terminating NUL
            if isinstance(node, list | tuple):
                self.size += 2 * len(node) + digits_below(len(node))  # an array's keys are "0", "1", ...
                for i, value in enumerate(node):
                    self.size += self.value(value, i, link, depth)
            else:
                for key, value in node.items():
                    self.size += 2 + self.key(key, link) + self.value(value, key, link, depth)
        return self.figures()

    def figures(self) -> BodyFigures:
        limits = self.limits
        if self.values > limits.max_json_values:
            self.problems.insert(0, ConfigProblem(path="(body)", rule=(
                f"holds more than {limits.max_json_values:,} JSON values; paiq accepts at most "
                f"{limits.max_json_values:,} in a job ({setting('max_json_values')})")))
        if self.too_deep is not None:
            self.problems.insert(0, ConfigProblem(path=spelled(self.too_deep), rule=(
                f"nests objects and lists {self.depth:,} levels deep; paiq accepts at most "
                f"{limits.max_json_depth} levels ({setting('max_json_depth')})")))
        if self.unlisted:
            self.problems.append(ConfigProblem(path="(body)", rule=(
                f"and {self.unlisted:,} more problems like these, not listed")))
        return BodyFigures(problems=tuple(self.problems), bson_bytes=self.size, values=self.values, depth=self.depth)

    def key(self, key: object, link: Link) -> int:
        if not isinstance(key, str):
            return len(str(key))
        data = self.text(key, key, link, "key ")
        if len(data) > self.limits.max_key_bytes:
            self.refuse((link, key), (f"key of {len(data):,} bytes; paiq accepts keys of at most "
                                      f"{self.limits.max_key_bytes:,} bytes ({setting('max_key_bytes')})"))
        return len(data)

    def value(self, value: object, key: str | int, link: Link, depth: int) -> int:
        """The bytes of ``value`` itself as BSON (a container's are counted when it is walked). Its link
        is made only for a container or a refusal, and JSON's own types are tested first (``isinstance``
        of a built-in type is quick, of an abstract one is not)."""
        self.values += 1
        if isinstance(value, str):
            return self.string(value, key, link)
        if isinstance(value, dict | list | tuple):
            self.stack.append((value, (link, key), depth + 1))
            return 0
        if value is None:
            return 0
        if isinstance(value, bool):
            return 1
        if isinstance(value, int):
            return self.integer(value, (link, key))
        if isinstance(value, float):
            if not math.isfinite(value):
                self.refuse((link, key), f"must be a finite number, got {value}")
            return 8
        if isinstance(value, Mapping):
            self.stack.append((value, (link, key), depth + 1))
        return 0

    def string(self, value: str, key: str | int, link: Link) -> int:
        data = self.text(value, key, link, "")
        if len(data) > self.limits.max_string_bytes:
            self.refuse((link, key), (f"string of {len(data):,} bytes; paiq accepts strings of at most "
                                      f"{self.limits.max_string_bytes:,} bytes ({setting('max_string_bytes')})"))
        return 5 + len(data)  # its length, its bytes and a NUL

    def text(self, value: str, key: str | int, link: Link, what: str) -> bytes:
        """``value`` as UTF-8, refusing what MongoDB and the engine cannot hold: lone surrogates (a JSON
        ``\\ud800``-``\\udfff`` escape without its pair) and NUL characters."""
        try:
            data = value.encode()
        except UnicodeEncodeError as e:
            self.refuse((link, key), (
                f"{what}holds a lone surrogate ({printable(value[e.start])} at character {e.start:,}): a JSON "
                "\\ud800-\\udfff escape must be one of a pair that makes one character, and only Unicode text "
                "can be stored"))
            return value.encode("utf-8", "surrogatepass")
        if "\x00" in value:
            self.refuse((link, key), (
                f"{what}holds a NUL character (\\u0000 at character {value.index(chr(0)):,}): MongoDB cannot "
                "store one in a key, nor Linux pass one in a variable, argument or path"))
        return data

    def integer(self, value: int, at: Link) -> int:
        if -INT32 <= value < INT32:
            return 4
        if not -INT64 <= value < INT64:
            digits = len(str(abs(value))) if value.bit_length() < 14_000 else value.bit_length() * 3 // 10
            self.refuse(at, f"an integer of {digits:,} digits; MongoDB stores integers of at most 8 bytes "
                            "(-2^63 to 2^63-1)")
        return 8


def walk(body: Mapping[str, Any], limits: JobLimits) -> BodyFigures:
    """Every limit on the body's keys and values, its depth and its number of values, and its size as
    BSON (what the job document's raw config takes in MongoDB), in one pass."""
    return _Walk(limits).run(body)


def digits_below(n: int) -> int:
    """The digits of 0, 1, ..., n-1 written in decimal, all together."""
    total, low, width = 0, 0, 1
    while low < n:
        high = min(n, 10**width)
        total += (high - low) * width
        low, width = high, width + 1
    return total


def bson_bytes(value: Mapping[str, Any]) -> int:
    """The size of ``value`` as a BSON document, without limits (for what paiq itself writes)."""
    return walk(value, JobLimits(max_json_values=2**62, max_json_depth=2**62, max_key_bytes=2**62,
                                 max_string_bytes=2**62)).bson_bytes

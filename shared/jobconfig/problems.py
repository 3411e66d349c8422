"""How a refused job config is worded: one problem per JSON path, a rule a user can act on.

pydantic's errors become :class:`ConfigProblem` values here, with the path in the protocol's spelling
(``taskRoles[0].portList[1].beginAt``) and, where paiq is stricter than OpenPAI's schema or a number has
a meaning of its own, why.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError


class ConfigProblem(BaseModel):
    model_config = ConfigDict(frozen=True)
    path: str
    rule: str

    def __str__(self) -> str:
        return f"{self.path}: {self.rule}"


def problems_from(error: ValidationError) -> list[ConfigProblem]:
    errors = error.errors(include_url=False)
    locs = [tuple(err["loc"]) for err in errors]
    # pydantic also reports a list as too short when its items fail; the item errors say it better.
    return [
        ConfigProblem(path=_path(err["loc"]), rule=_explained(err, rule_for(err)))
        for err, loc in zip(errors, locs, strict=True)
        if not (err["type"] == "too_short" and any(o[: len(loc)] == loc and o != loc for o in locs))
    ]


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(body)"


def rule_for(err: Any) -> str:
    """Our own wording of one pydantic error: never pydantic's message (its internals, its links).
    Types our models raise are worded one by one; any other falls back on its family (``*_type``,
    ``*_parsing``, ...) and at worst on a generic rule naming the value."""
    kind: str = err["type"]
    ctx: dict[str, Any] = err.get("ctx") or {}
    value = err.get("input")
    got = json_type(value)
    rules = {
        "missing": "is required",
        "greater_than_equal": f"must be >= {ctx.get('ge')}, got {_value(value)}",
        "less_than_equal": f"must be <= {ctx.get('le')}, got {_value(value)}",
        "greater_than": f"must be > {ctx.get('gt')}, got {_value(value)}",
        "less_than": f"must be < {ctx.get('lt')}, got {_value(value)}",
        "string_pattern_mismatch": f"must match {ctx.get('pattern')}, got {_value(value)}",
        "int_type": f"must be an integer (2 or \"2\"), got {got}"
                    + (f" {shown(value)}" if isinstance(value, str | float) else ""),
        "string_type": f"must be a string, got {got}",
        "string_unicode": "must be Unicode text (a JSON \\ud800-\\udfff escape must be one of a pair)",
        "string_too_short": "must not be empty",
        "string_too_long": f"must be at most {ctx.get('max_length')} characters, got {_length(value)}",
        "too_short": f"must have at least {ctx.get('min_length')} item(s)",
        "too_long": f"must have at most {ctx.get('max_length')} items, got {_length(value)}",
        "model_type": f"must be an object, got {got}",
        "model_attributes_type": f"must be an object, got {got}",
        "dict_type": f"must be an object, got {got}",
        "tuple_type": f"must be a list, got {got}",
        "list_type": f"must be a list, got {got}",
        "extra_forbidden": "is not a field of the protocol",
        "recursion_loop": "nests objects and lists too deeply",
        "finite_number": f"must be a finite number, got {_value(value)}",
    }
    return rules.get(kind) or _family(kind, got, value)


# The value a family of pydantic error types asks for, by the type's first word.
_EXPECTED = {"int": "an integer", "float": "a number", "decimal": "a number", "bool": "a boolean",
             "string": "a string", "str": "a string", "dict": "an object", "mapping": "an object",
             "model": "an object", "dataclass": "an object", "list": "a list", "tuple": "a list",
             "set": "a list", "iterable": "a list", "none": "null"}


def _family(kind: str, got: str, value: object) -> str:
    """A rule for a pydantic error type not worded above, from its family; never pydantic's message."""
    first = kind.split("_", 1)[0]
    if first in _EXPECTED and kind.endswith(("_type", "_parsing", "_required")):
        return f"must be {_EXPECTED[first]}, got {got}" + (f" {shown(value)}" if isinstance(value, str) else "")
    if kind.startswith(("missing", "default_factory")):
        return "is required"
    if kind.startswith(("unexpected", "no_such", "extra")):
        return "is not a field of the protocol"
    if kind.startswith("recursion"):
        return "nests objects and lists too deeply"
    return f"is not acceptable here, got {got}" + (f" {shown(value)}" if value is not None else "")


def _value(value: object) -> str:
    """A number as the rule quotes it; anything else shortened (:func:`shown`, without parentheses)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value)
    return shown(value)[1:-1]


def _length(value: object) -> str:
    return f"{len(value):,}" if isinstance(value, str | list | tuple | dict) else json_type(value)


# Why a limit stands where paiq is stricter than OpenPAI's schema (or where the number has a meaning),
# by (field, pydantic error type); appended to the rule.
_WHY: dict[tuple[str, str], str] = {
    ("retryCount", "greater_than_equal"): "-1 retries failures without limit, -2 starts the job again after "
                                          "every exit until it is stopped",
    ("retryCount", "less_than_equal"): "paiq's limit; -1 retries failures without limit",
    ("taskNumber", "greater_than_equal"): "a role of no tasks would never start",
    ("taskNumber", "less_than_equal"): ("a role has at most as many tasks as a job; each task's environment lists "
                                        "every task of its role, and past 5,956 tasks that list alone passes "
                                        "Linux's 128 KiB limit on one variable"),
    ("cpuNumber", "greater_than_equal"): "OpenPAI's launcher refused less too",
    ("cpuNumber", "less_than_equal"): "paiq's limit: no node offers more",
    ("memoryMB", "greater_than_equal"): "paiq's least, OpenPAI's default, above shmMB's default of 64",
    ("memoryMB", "less_than_equal"): "paiq's limit (16 TiB): no node offers more",
    ("gpuNumber", "less_than_equal"): "paiq's limit: no node offers more",
    ("beginAt", "less_than_equal"): "the highest TCP port",
    ("beginAt", "greater_than_equal"): "0 lets the platform choose the ports",
    ("portNumber", "greater_than_equal"): "a label names at least one port",
    ("portNumber", "less_than_equal"): "paiq's limit of ports per label",
}
_TILDE = ("no '~': paiq's job ids are user~jobName~suffix and '~' separates their parts; OpenPAI's "
          "jobName pattern had no '~' either")


def _explained(err: Any, rule: str) -> str:
    field = next((part for part in reversed(err["loc"]) if isinstance(part, str)), "")
    if (field, err["type"]) == ("jobName", "string_pattern_mismatch") and "~" in str(err.get("input")):
        return f"{rule} ({_TILDE})"
    why = _WHY.get((field, err["type"]))
    return f"{rule} ({why})" if why else rule


def shown(value: object) -> str:
    """A refused value as the rule quotes it: short enough to read, and plain ASCII (``ascii``: lone
    surrogates and control characters escaped)."""
    text = ascii(value) if isinstance(value, str) else repr(value)
    return f"({text if len(text) <= 40 else text[:37] + '...'})"


def json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__

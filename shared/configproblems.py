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
    errors = error.errors()
    locs = [tuple(err["loc"]) for err in errors]
    # pydantic also reports a list as too short when its items fail; the item errors say it better.
    return [
        ConfigProblem(path=_path(err["loc"]), rule=_explained(err, _rule(err)))
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


def _rule(err: Any) -> str:
    kind: str = err["type"]
    ctx: dict[str, Any] = err.get("ctx") or {}
    got = json_type(err.get("input"))
    rules = {
        "missing": "is required",
        "greater_than_equal": f"must be >= {ctx.get('ge')}, got {err.get('input')!r}",
        "less_than_equal": f"must be <= {ctx.get('le')}, got {err.get('input')!r}",
        "string_pattern_mismatch": f"must match {ctx.get('pattern')}, got {err.get('input')!r}",
        "int_type": f"must be an integer (2 or \"2\"), got {got}"
                    + (f" {shown(err.get('input'))}" if isinstance(err.get("input"), str | float) else ""),
        "string_type": f"must be a string, got {got}",
        "string_too_short": "must not be empty",
        "string_too_long": f"must be at most {ctx.get('max_length')} characters",
        "too_short": f"must have at least {ctx.get('min_length')} item(s)",
        "too_long": f"must have at most {ctx.get('max_length')} items",
        "model_type": f"must be an object, got {got}",
        "model_attributes_type": f"must be an object, got {got}",
        "dict_type": f"must be an object, got {got}",
        "tuple_type": f"must be a list, got {got}",
        "list_type": f"must be a list, got {got}",
    }
    return rules.get(kind, str(err.get("msg", kind)))


# Why a limit stands where paiq is stricter than OpenPAI's schema (or where the number has a meaning),
# by (field, pydantic error type); appended to the rule.
_WHY: dict[tuple[str, str], str] = {
    ("retryCount", "greater_than_equal"): "-1 retries failures without limit, -2 starts the job again after "
                                          "every exit until it is stopped",
    ("retryCount", "less_than_equal"): "paiq's limit; -1 retries failures without limit",
    ("taskNumber", "greater_than_equal"): "a role of no tasks would never start",
    ("taskNumber", "less_than_equal"): ("each task's environment lists every task of its role, and a longer list "
                                        "passes Linux's 128 KiB limit on one variable: such a job could never start"),
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
    """A refused value as the rule quotes it: short enough to read."""
    text = repr(value)
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
